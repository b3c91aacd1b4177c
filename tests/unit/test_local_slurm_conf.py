"""The local head node's slurm.conf keeps what ParallelCluster's keeps (aws-parallelcluster-cookbook's template)."""

from __future__ import annotations

import re
from pathlib import Path

from trainrun.local.slurm_head_node import slurm_conf


def settings(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)=(.*)$", text, re.MULTILINE))


def test_by_default_slurm_forgets_a_finished_job_after_parallelclusters_300_seconds_and_keeps_no_accounting() -> None:
    conf = settings(slurm_conf(Path("/s"), Path("/s/munge.sock"), ["compute-1"], 6817, [6818]))
    assert conf["MinJobAge"] == "300"
    assert conf["AccountingStorageType"] == "accounting_storage/none"
    assert (conf["SlurmctldTimeout"], conf["SlurmdTimeout"], conf["KillWait"]) == ("300", "180", "30")


def test_a_test_may_shorten_min_job_age() -> None:
    conf = settings(slurm_conf(Path("/s"), Path("/s/munge.sock"), ["compute-1"], 6817, [6818], min_job_age=2))
    assert conf["MinJobAge"] == "2"


def test_slurm_schedules_a_batch_job_as_soon_as_it_is_submitted_not_up_to_3_seconds_later() -> None:
    # Slurm's default batch_sched_delay (3 s) was a pure wait in every local job: it cost each job up to
    # 3 real seconds (90 nominal ones at the local time scale)
    conf = settings(slurm_conf(Path("/s"), Path("/s/munge.sock"), ["compute-1"], 6817, [6818]))
    assert "batch_sched_delay=0" in conf["SchedulerParameters"].split(",")
