"""Which FSx for Lustre file systems a local node can mount: the ones FSx says are AVAILABLE.

On AWS a node mounts `<DNSName>@tcp:/<MountName>` once the file system is AVAILABLE, and the
mount fails before. The local nodes' `mount` stand-in (examples/local-head-node/mount) cannot ask
the emulated FSx (it runs in the head node's namespace, and a describe would move the emulator's
lifecycle on), so the FSx emulator publishes each file system's state here when it is observed:
one file per AVAILABLE file system, named after its DNS name, holding its mount name. A file
system that is CREATING, DELETING or gone has no file, and the stand-in refuses its mount.
Nothing here imports moto: the head node reads the directory's path without the emulator.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import tempfile
import threading
from pathlib import Path

# Read by the nodes' mount stand-in: the directory of the AVAILABLE file systems.
ENVIRONMENT_VARIABLE = "TRAINRUN_LOCAL_LUSTRE_SERVERS"

_lock = threading.Lock()
_directory: Path | None = None


def directory() -> Path:
    """The directory of this process's AVAILABLE file systems (made on first use)."""
    global _directory
    with _lock:
        if _directory is None:
            _directory = Path(tempfile.mkdtemp(prefix="trl-lustre-"))
            _directory.chmod(0o755)
            atexit.register(shutil.rmtree, _directory, ignore_errors=True)
        return _directory


def publish(dns_name: str, mount_name: str, *, available: bool) -> None:
    """Say whether the file system of `dns_name` takes mounts now."""
    path = directory() / dns_name
    if available:
        path.write_text(mount_name)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
