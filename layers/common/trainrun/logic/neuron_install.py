"""The OnNodeConfigured script that installs the Neuron SDK on every node of a run's cluster.

The shell lives in `trainrun/scripts/` as `.sh` files (shellcheck checks them): one per OS
family of the OSes the pinned release serves (`neuron-apt.sh`: Ubuntu, the only one) and
`node-configured.sh`, the steps every node runs. `render_script` puts a header of
quoted assignments (the OS's facts and `NEURON_VERSIONS`, the one place versions are pinned) in
front of them. Create cluster uploads the result to the stack's config bucket under a key named
after its SHA-256 (`script_key`), so a given script has one address forever and uploading it
again changes nothing; the cluster config points both node kinds at it, with the node kind
(HeadNode or ComputeFleet) as the argument.

The head node's PyTorch Neuron virtual environment is reused: the first head node of a stack to
need it builds it (pip, minutes) and saves it as an archive under `venv_prefix`, a content
address in the config bucket (`venv_address`: a digest of the OS, its interpreter, the pinned
versions and node-configured.sh itself), and the next ones unpack it instead. That matters because
ParallelCluster starts clustermgtd, which launches the compute nodes, only once the head node's
OnNodeConfigured has finished. An archive that does not say it is that address is rebuilt, not used.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainrun.errors import TrainrunError
from trainrun.model.jobs import DEFAULT_USERS

SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "scripts"
SCRIPT_KEY_PREFIX = "cluster-scripts/"
SCRIPT_NAME = "on-node-configured.sh"
# Where head nodes keep the PyTorch Neuron environments they built, one prefix per content address.
VENV_KEY_PREFIX = "neuron-venv/"
HEAD_NODE_ARGS = ["HeadNode"]
COMPUTE_NODE_ARGS = ["ComputeFleet"]

# Neuron 2.29.0 for Trn1/Trn1n/Trn2, as the Neuron SDK's release manifest
# (aws-neuron-sdk src/helperscripts/n2-manifest.json) lists it. The Python wheels take 3.10 to 3.12.
NEURON_VERSIONS = {
    "neuron_release": "2.29.0",
    "aws_neuronx_dkms": "2.27.4.0",
    "aws_neuronx_collectives": "2.31.24.0",
    "aws_neuronx_runtime_lib": "2.31.24.0",
    "aws_neuronx_tools": "2.29.18.0",
    "neuronx_cc": "2.24.5133.0",
    "torch_neuronx": "2.9.0.2.13.24727",
}


@dataclass(frozen=True)
class _Os:
    """A cluster OS the pinned release serves: how its script installs the SDK."""

    family: str  # the package manager's script: neuron-<family>.sh
    python: str  # the interpreter the virtual environment is built with
    facts: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class _NotServed:
    """A cluster OS the pinned release cannot serve, and why."""

    reason: str


# Every ParallelCluster OS (trainrun.model.run_file.PCLUSTER_OSES) and whether the pinned release
# installs PyTorch Neuron (torch-neuronx, for PyTorch 2.9) on it. Source: the setup guide of
# Neuron SETUP_GUIDE_RELEASE, "Install PyTorch via manual installation" (aws-neuron-sdk
# setup/pytorch/manual.rst at v2.29.0): Ubuntu 24.04, Ubuntu 22.04 or Amazon Linux 2023, and on
# Amazon Linux 2023 "PyTorch 2.9 is not yet available [...] Use Ubuntu 24.04 for PyTorch 2.9
# support"; its Rocky Linux 9 page (setup/setup-rocky-linux-9.rst) installs the framework by that
# Amazon Linux 2023 guide. Check the table again against the new guide when NEURON_VERSIONS moves.
# Ubuntu's own python3 is in the wheels' range (3.10 on 22.04, 3.12 on 24.04).
SETUP_GUIDE_RELEASE = "2.29.0"
_GUIDE_OSES = "whose setup guide covers Ubuntu 22.04, Ubuntu 24.04 and Amazon Linux 2023 only"
_OPERATING_SYSTEMS: dict[str, _Os | _NotServed] = {
    "ubuntu2204": _Os("apt", "python3", (("ubuntu_codename", "jammy"),)),
    "ubuntu2404": _Os("apt", "python3", (("ubuntu_codename", "noble"),)),
    "alinux2023": _NotServed("whose setup guide says PyTorch 2.9 is not yet available on Amazon Linux 2023"),
    "rocky9": _NotServed(
        "whose setup guide installs PyTorch Neuron on Rocky Linux 9 by its Amazon Linux 2023 steps, "
        "and PyTorch 2.9 is not yet available there"
    ),
    "rhel8": _NotServed(_GUIDE_OSES),
    "rhel9": _NotServed(_GUIDE_OSES),
    "rocky8": _NotServed(_GUIDE_OSES),
}


class ScriptUploadFailed(TrainrunError):
    """The node script could not be written to the config bucket."""


def supported_os() -> list[str]:
    """The cluster OSes the pinned Neuron release serves."""
    return sorted(name for name, system in _OPERATING_SYSTEMS.items() if isinstance(system, _Os))


def unsupported_os_reason(os_name: str) -> str | None:
    """Why the pinned Neuron release cannot serve `os_name` (a ParallelCluster OS), or None when it can."""
    system = _OPERATING_SYSTEMS.get(os_name)
    if isinstance(system, _Os):
        return None
    why = system.reason if system is not None else _GUIDE_OSES
    release, torch_neuronx = NEURON_VERSIONS["neuron_release"], NEURON_VERSIONS["torch_neuronx"]
    return f"trainrun installs Neuron {release} (torch-neuronx {torch_neuronx}), {why}"


# What the head node's OnNodeConfigured writes (atomically, as its very last step) once the PyTorch
# Neuron environment is in place: a root-owned file outside the shared /home and /fsx. Prepare head
# node runs while the cluster is created and waits for it (prepare-as-root.sh), since the workload's
# setup activates that environment and ParallelCluster runs OnNodeConfigured after mounting /fsx.
NODE_CONFIGURED_MARKER = "/var/lib/trainrun/node-configured"


def render_script(os_name: str, config_bucket: str | None = None) -> str:
    """The whole OnNodeConfigured script for `os_name` (a `cluster.os` value). With
    `config_bucket`, its head node reuses the PyTorch Neuron environment saved at `venv_prefix`
    (or builds and saves it there); without, it always builds it."""
    system = _system(os_name)
    assignments = {
        "os_name": os_name,
        "default_user": DEFAULT_USERS[os_name],
        "python": system.python,
        **dict(system.facts),
        **NEURON_VERSIONS,
        "venv_address": venv_address(os_name),
        "venv_store": venv_prefix(config_bucket, os_name) if config_bucket else "",
        "configured_marker": NODE_CONFIGURED_MARKER,
    }
    header = [
        "#!/bin/bash",
        f"# trainrun: the Neuron SDK for a node of the cluster (OnNodeConfigured), for {os_name}.",
        f"# Usage: {SCRIPT_NAME} HeadNode|ComputeFleet. Rendered by trainrun.logic.neuron_install from",
        f"# trainrun/scripts/neuron-{system.family}.sh and node-configured.sh.",
        *(f"{name}={_quoted(value)}" for name, value in assignments.items()),
    ]
    parts = ["\n".join(header), _read(f"neuron-{system.family}.sh"), _read("node-configured.sh")]
    return "\n\n".join(part.strip("\n") for part in parts) + "\n"


def venv_address(os_name: str) -> str:
    """The content address of the head node's PyTorch Neuron environment on `os_name`: a digest of
    everything it is built from here (the OS, its interpreter, the pinned versions, and
    node-configured.sh, which builds it). The interpreter's exact version, known on the node only,
    is in the archive's name below it (node-configured.sh)."""
    system = _system(os_name)
    built_from = {
        "os": os_name,
        "python": system.python,
        "versions": NEURON_VERSIONS,
        "script": _read("node-configured.sh"),
    }
    return hashlib.sha256(json.dumps(built_from, sort_keys=True).encode()).hexdigest()


def venv_prefix(config_bucket: str, os_name: str) -> str:
    """Where head nodes on `os_name` keep and find that environment: an s3:// prefix ending in `/`,
    the only place of the config bucket their role may write for it (trainrun.logic.cluster_config)."""
    return f"s3://{config_bucket}/{VENV_KEY_PREFIX}{venv_address(os_name)}/"


def script_key(script: str, name: str = SCRIPT_NAME) -> str:
    """Where a node script lives in the config bucket: named after its content."""
    return f"{SCRIPT_KEY_PREFIX}{hashlib.sha256(script.encode()).hexdigest()}/{name}"


def node_script_uri(bucket: str, script: str, name: str = SCRIPT_NAME) -> str:
    """The s3:// URI a node script has in `bucket` (once uploaded there): its content address."""
    return f"s3://{bucket}/{script_key(script, name)}"


def script_uri(bucket: str, os_name: str) -> str:
    """The s3:// URI the script for `os_name` has (once `upload_script` has put it there)."""
    return node_script_uri(bucket, render_script(os_name, bucket))


def upload_script(s3: Any, bucket: str, os_name: str) -> str:
    """Put the script for `os_name` in `bucket` under its content address; its s3:// URI.

    Safe to repeat: the same script always goes to the same key with the same bytes.
    """
    return upload_node_script(s3, bucket, render_script(os_name, bucket), SCRIPT_NAME, "the Neuron install script")


def upload_node_script(s3: Any, bucket: str, script: str, name: str, what: str) -> str:
    """Put a node script in `bucket` under its content address (`script_key`); its s3:// URI.
    ScriptUploadFailed names `what` when S3 refuses."""
    from botocore.exceptions import ClientError

    key = script_key(script, name)
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=script.encode(), ContentType="text/x-shellscript")
    except ClientError as exc:
        raise ScriptUploadFailed(f"could not upload {what} to s3://{bucket}/{key}: {exc}") from exc
    return node_script_uri(bucket, script, name)


def _system(os_name: str) -> _Os:
    system = _OPERATING_SYSTEMS.get(os_name)
    if not isinstance(system, _Os):
        raise ValueError(f"no Neuron install script for cluster.os {os_name!r}; one of {', '.join(supported_os())}")
    return system


def _quoted(value: str) -> str:
    # Always single quotes, so the header reads the same for every value (shlex leaves some bare).
    return "'" + value.replace("'", "'\\''") + "'"


def _read(name: str) -> str:
    return (SCRIPTS_DIR / name).read_text(encoding="utf-8")
