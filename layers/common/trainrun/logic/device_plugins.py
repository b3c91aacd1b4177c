"""The Neuron and EFA device plugins an EKS run's cluster needs (pure): without them a node
advertises no `aws.amazon.com/neuron` nor `vpc.amazonaws.com/efa`, and every job pod stays Pending.

The objects are the official Helm charts' output, rendered once and pinned, shipped as package data
(trainrun/manifests/*.yaml; each file's header names its chart, version, values and the
`helm template` command that re-renders it): the control plane applies them as they are, with no
Helm at run time.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

# In apply order (Helm's install order): the Neuron plugin's ServiceAccount, ClusterRole and
# ClusterRoleBinding, then its DaemonSet; then the EFA plugin's DaemonSet.
MANIFESTS = ("neuron-device-plugin.yaml", "efa-device-plugin.yaml")

# The images the manifests pin (tests/unit/test_device_plugins.py checks they are the objects').
NEURON_DEVICE_PLUGIN_IMAGE = "public.ecr.aws/neuron/neuron-device-plugin:2.22.4.0"
EFA_DEVICE_PLUGIN_IMAGE = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20"

# (namespace, name) of the DaemonSets the control plane waits on to be ready.
DAEMONSETS = (("kube-system", "neuron-device-plugin"), ("kube-system", "aws-efa-k8s-device-plugin"))


def manifest_text(name: str) -> str:
    """One manifest file as shipped, its header comment included."""
    return resources.files("trainrun").joinpath("manifests", name).read_text(encoding="utf-8")


def device_plugin_manifests() -> list[dict[str, Any]]:
    """Every object of both device plugins, parsed afresh (the caller may change them), in apply order."""
    return [obj for name in MANIFESTS for obj in yaml.safe_load_all(manifest_text(name)) if obj]
