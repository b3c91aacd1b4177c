"""The machine's user that the local head node makes its OS's default user (the workload's user).

In a module of its own, with no head node running: useradd and userdel replace this machine's
/etc/passwd, and Linux then drops the head nodes' own /etc/passwd (a bind mount on the file's
old entry, in their mount namespace).
"""

from __future__ import annotations

import pwd
import subprocess

import pytest

from trainrun.local.slurm_head_node import workload_account

from .conftest import NEEDS_LOCAL_HEAD_NODE

pytestmark = [*NEEDS_LOCAL_HEAD_NODE, pytest.mark.alone]


def test_a_missing_workload_user_is_created_once_as_a_system_user() -> None:
    # Given a machine without the user (a fresh CI machine)
    name = "trainrun-e2e-user"
    subprocess.run(["userdel", name], capture_output=True, check=False)
    try:
        # When the head node asks for it twice
        created = workload_account(name)
        again = workload_account(name)
        entry = pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
    # Then the first call created a system user without a login, the second found the same one
    assert created == again == (entry.pw_uid, entry.pw_gid)
    assert entry.pw_uid != 0 and entry.pw_gid != 0
    assert (entry.pw_shell, entry.pw_dir) == ("/usr/sbin/nologin", "/nonexistent")
