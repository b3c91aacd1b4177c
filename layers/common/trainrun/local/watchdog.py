"""Ends a local head node's processes when the process that started it dies, even by kill -9.

`python -m trainrun.local.watchdog <fd> <mount namespace>` blocks reading the pipe `fd`, whose
write end only the starting process holds. A byte means the head node was stopped as it should
be: the watchdog exits. End of file means its owner is gone without stopping it (the kernel
closes a dead process's descriptors, whatever killed it): the watchdog ends every process of
the head node's mount namespace (MUNGE, Slurm's daemons, slurmstepd, the jobs, SSM scripts,
the namespace's holder), so nothing is left running. The sandbox directory is deleted by the
next start of the local runtime (`trainrun.local.head_node_lifecycle.reap_dead_sandboxes`).

PR_SET_PDEATHSIG would not do: it fires when the *thread* that started a process ends (the
head node is started from a short-lived request thread), and does not reach the processes
Slurm starts (slurmstepd and the jobs).
"""

from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str]) -> int:
    from trainrun.local.slurm_head_node import end_namespace_processes

    # Ctrl-C in the owner's terminal is the owner's to handle; a stopping owner says so on the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    lifeline, namespace = int(argv[1]), argv[2]
    try:
        stopped_properly = os.read(lifeline, 1) != b""
    except OSError:
        stopped_properly = False
    if not stopped_properly:
        end_namespace_processes(namespace, spare=set())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
