"""The OnNodeConfigured script that mounts the run's file system at /fsx on every node.

ParallelCluster mounts an existing FSx for Lustre file system itself (SharedStorage) only if it
is AVAILABLE when the cluster is created: its config validation reads the file system's network
interfaces (ExistingFsxNetworkingValidator in aws-parallelcluster's validators). Waiting for it
would put the file system's creation (~12 minutes, trainrun.logic.aws_clock) before the cluster's
on the critical path. So the cluster is created beside it, and every node mounts the file system
itself, first in its OnNodeConfigured sequence (`trainrun/scripts/mount-file-system.sh`, which
retries until the file system takes the mount). Create cluster uploads the script to the
stack's config bucket under its content address, as it does the Neuron install script.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from trainrun.logic.neuron_install import SCRIPTS_DIR, node_script_uri, upload_node_script

MOUNT_SCRIPT_NAME = "mount-file-system.sh"
# How long a node tries to mount a file system that is still being created. ParallelCluster gives
# a node's whole configuration 2100 s (NODE_BOOTSTRAP_TIMEOUT, aws-parallelcluster's constants.py)
# and the head node reaches its custom actions a few minutes into it, so the wait stops well before
# that: a mount that cannot succeed fails with mount's own error rather than a bare timeout.
MOUNT_WAIT_SECONDS = 1200


@cache
def mount_script() -> str:
    return (SCRIPTS_DIR / MOUNT_SCRIPT_NAME).read_text()


def mount_script_uri(bucket: str) -> str:
    """The s3:// URI the mount script has in `bucket` (once `upload_mount_script` has put it there)."""
    return node_script_uri(bucket, mount_script(), MOUNT_SCRIPT_NAME)


def upload_mount_script(s3: Any, bucket: str) -> str:
    """Put the mount script in `bucket` under its content address; its s3:// URI. Safe to repeat."""
    return upload_node_script(s3, bucket, mount_script(), MOUNT_SCRIPT_NAME, "the file system's mount script")


def mount_args(dns_name: str, mount_name: str, mount_dir: str) -> list[str]:
    """The script's arguments: the file system's DNS and mount names (both known from the moment
    CreateFileSystem answers), where to mount it, and how long to keep trying."""
    return [dns_name, mount_name, mount_dir, str(MOUNT_WAIT_SECONDS)]
