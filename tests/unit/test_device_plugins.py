"""The device plugin manifests (trainrun/manifests/*.yaml, loaded by trainrun.logic.device_plugins):
valid Kubernetes objects, tolerating the Trainium node groups' taint, scheduled on trainrun's
instance types, and pinned to the versions their headers name."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from trainrun.logic import device_plugins
from trainrun.logic.cluster_config import EFA_INSTANCE_TYPES
from trainrun.logic.eks_node_group import NEURON_TAINT
from trainrun.logic.eks_versions import DEFAULT_KUBERNETES_VERSION
from trainrun.model.run_file import TRAINIUM_INSTANCE_TYPES

LAYER_SOURCE = Path(__file__).resolve().parents[2] / "layers" / "common"
OBJECTS = device_plugins.device_plugin_manifests()
DAEMONSETS = [obj for obj in OBJECTS if obj["kind"] == "DaemonSet"]


def _header(name: str) -> dict[str, str]:
    """The `# key: value` lines of a manifest's header comment (before its first `---`)."""
    head = device_plugins.manifest_text(name).split("\n---\n", 1)[0]
    return dict(re.findall(r"^# (chart|chart-version|image): +(\S+)", head, re.MULTILINE))


def _objects_of(name: str) -> list[dict[str, Any]]:
    return [obj for obj in yaml.safe_load_all(device_plugins.manifest_text(name)) if obj]


def _instance_types(daemonset: dict[str, Any]) -> set[str]:
    """The instance types every term of the DaemonSet's required node affinity admits."""
    affinity = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    admitted: set[str] = set()
    for term in terms:
        for expression in term["matchExpressions"]:
            if expression["key"] == "node.kubernetes.io/instance-type":
                assert expression["operator"] == "In"
                admitted |= set(expression["values"])
    return admitted


def _tolerates(tolerations: list[dict[str, Any]], key: str, value: str, effect: str) -> bool:
    """Kubernetes' rule (Taints and Tolerations): key and effect match (an empty one matches
    any), and the operator is Exists or Equal with the taint's value."""
    for toleration in tolerations:
        if toleration.get("key", "") not in ("", key) or toleration.get("effect", "") not in ("", effect):
            continue
        if toleration.get("operator", "Equal") == "Exists" or toleration.get("value", "") == value:
            return True
    return False


def test_every_object_parses_in_apply_order() -> None:
    kinds = [(obj["apiVersion"], obj["kind"], obj["metadata"]["name"]) for obj in OBJECTS]
    assert kinds == [
        ("v1", "ServiceAccount", "neuron-device-plugin"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "neuron-device-plugin"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "neuron-device-plugin"),
        ("apps/v1", "DaemonSet", "neuron-device-plugin"),
        ("apps/v1", "DaemonSet", "aws-efa-k8s-device-plugin"),
    ]
    # Fresh objects each call: a caller changing one changes nothing for the next.
    assert device_plugins.device_plugin_manifests() == OBJECTS
    assert device_plugins.device_plugin_manifests()[0] is not OBJECTS[0]


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda obj: f"{obj['kind']}/{obj['metadata']['name']}")
def test_each_object_passes_the_kubernetes_openapi_schema_strictly(obj: dict[str, Any]) -> None:
    # Kubernetes' own OpenAPI schema of the kind, unknown fields refused, for the version trainrun
    # creates clusters at (kubernetes-validate bundles it: the local API server checks the same).
    assert DEFAULT_KUBERNETES_VERSION == "1.35"
    kubernetes_validate.validate(obj, DEFAULT_KUBERNETES_VERSION, strict=True)


def test_the_daemonsets_are_the_ones_the_control_plane_waits_on() -> None:
    assert [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in DAEMONSETS] == list(device_plugins.DAEMONSETS)
    for daemonset in DAEMONSETS:
        spec = daemonset["spec"]
        selector = spec["selector"]["matchLabels"]
        assert selector.items() <= spec["template"]["metadata"]["labels"].items()
        assert spec["template"]["spec"]["priorityClassName"] == "system-node-critical"


@pytest.mark.parametrize("daemonset", DAEMONSETS, ids=lambda d: d["metadata"]["name"])
def test_each_daemonset_tolerates_the_trainium_node_groups_taint(daemonset: dict[str, Any]) -> None:
    tolerations = daemonset["spec"]["template"]["spec"]["tolerations"]
    # The node group's taint as EKS takes it (NO_SCHEDULE) is NoSchedule on the node.
    assert NEURON_TAINT["effect"] == "NO_SCHEDULE"
    assert _tolerates(tolerations, NEURON_TAINT["key"], NEURON_TAINT["value"], "NoSchedule")
    assert _tolerates(tolerations, "aws.amazon.com/neuron", "anything", "NoSchedule")
    assert _tolerates(tolerations, "CriticalAddonsOnly", "true", "NoSchedule")
    assert not _tolerates(tolerations, "some-other-taint", "true", "NoSchedule")


def test_the_daemonsets_run_on_every_instance_type_trainrun_uses() -> None:
    neuron, efa = DAEMONSETS
    assert _instance_types(neuron) == set(TRAINIUM_INSTANCE_TYPES)
    assert {"trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge"} <= EFA_INSTANCE_TYPES <= _instance_types(efa)


@pytest.mark.parametrize(
    ("manifest", "image"),
    [
        ("neuron-device-plugin.yaml", device_plugins.NEURON_DEVICE_PLUGIN_IMAGE),
        ("efa-device-plugin.yaml", device_plugins.EFA_DEVICE_PLUGIN_IMAGE),
    ],
)
def test_the_pinned_versions_in_each_header_are_the_objects(manifest: str, image: str) -> None:
    header = _header(manifest)
    assert header.keys() == {"chart", "chart-version", "image"}
    objects = _objects_of(manifest)
    [daemonset] = [obj for obj in objects if obj["kind"] == "DaemonSet"]
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["image"] == header["image"] == image
    # A tag, never a moving one.
    tag = image.rpartition(":")[2]
    assert re.fullmatch(r"v?\d+(\.\d+)+", tag), tag
    # Every object carries the chart's version label, and the re-render command asks for it.
    for obj in objects:
        assert obj["metadata"]["labels"]["helm.sh/chart"] == f"{header['chart']}-{header['chart-version']}"
    assert f"--version {header['chart-version']} " in device_plugins.manifest_text(manifest)


def test_the_lambda_layer_ships_the_manifests() -> None:
    spec = importlib.util.spec_from_file_location("layer_contents", LAYER_SOURCE / "layer_contents.py")
    assert spec is not None and spec.loader is not None
    layer_contents = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layer_contents)
    files = {str(path) for path in layer_contents.layer_files()}
    assert {f"trainrun/manifests/{name}" for name in device_plugins.MANIFESTS} <= files
