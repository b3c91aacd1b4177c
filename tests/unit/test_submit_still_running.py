"""A submit command that outlasts the function's wait is looked at again, never sent twice nor failed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

import trainrun.steps.head_node
from trainrun.errors import SubmitStillRunning
from trainrun.model.run_record import RunStore
from trainrun.steps.head_node import SubmitRequest, Submitted, submit_job

from .conftest import moto_run_events
from .test_job_steps import RUN_ID, no_sleep, run, success  # noqa: F401 (run is a fixture)

IN_PROGRESS = {"Status": "InProgress", "ResponseCode": -1, "StandardOutputContent": "", "StandardErrorContent": ""}


@dataclass
class SlowSsm:
    """SendCommand / GetCommandInvocation: a command is InProgress for its first `polls_in_progress` looks."""

    polls_in_progress: int
    final: dict[str, Any]
    sent: list[str] = field(default_factory=list)
    looked_at: list[str] = field(default_factory=list)

    def send_command(self, **kwargs: Any) -> dict[str, Any]:
        self.sent.append(kwargs["Parameters"]["commands"][0])
        return {"Command": {"CommandId": f"command-{len(self.sent)}"}}

    def get_command_invocation(self, **kwargs: Any) -> dict[str, Any]:
        self.looked_at.append(kwargs["CommandId"])
        return IN_PROGRESS if len(self.looked_at) <= self.polls_in_progress else self.final


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # One look per invocation: the function's wait is over at once.
    monkeypatch.setattr(trainrun.steps.head_node, "SHORT_COMMAND_SECONDS", 0)


def submit(ssm: SlowSsm, store: RunStore, token: str) -> Submitted:
    return submit_job(
        ssm,
        store,
        SubmitRequest(run_id=RUN_ID, job="train", task_token=token),
        sfn=None,
        run_events=moto_run_events(),
        config_bucket="trainrun-config-test",
        sleep=no_sleep,
    )


def test_a_submit_still_in_progress_after_the_wait_is_retried_by_name_not_failed(
    run: RunStore,  # noqa: F811 (the fixture)
    short_wait: None,
) -> None:
    # Given a submit command that is still running when the function's wait ends
    ssm = SlowSsm(polls_in_progress=1, final=success("TRAINRUN-SUBMITTED job=train slurm_job_id=42 existing=false\n"))
    # When the step is invoked, then it raises the error the state machine retries
    with pytest.raises(SubmitStillRunning, match="command-1 is still InProgress"):
        submit(ssm, run, "token-1")
    # And its command is kept, with the job not yet submitted
    record = run.get(RUN_ID)
    assert record is not None and record.job_train is not None
    assert (record.job_train.command_id, record.job_train.slurm_job_id) == ("command-1", None)


def test_the_next_attempt_looks_at_the_same_command_again_instead_of_sending_another(
    run: RunStore,  # noqa: F811 (the fixture)
    short_wait: None,
) -> None:
    # Given a first attempt whose submit command outlasted its wait
    ssm = SlowSsm(polls_in_progress=1, final=success("TRAINRUN-SUBMITTED job=train slurm_job_id=42 existing=false\n"))
    with pytest.raises(SubmitStillRunning):
        submit(ssm, run, "token-1")
    # When the state machine retries the state (a new task token)
    submitted = submit(ssm, run, "token-2")
    # Then the one command sent is read again, and the job it submitted is recorded with the new token
    assert len(ssm.sent) == 1
    assert ssm.looked_at == ["command-1", "command-1"]
    assert submitted.slurm_job_id == 42
    record = run.get(RUN_ID)
    assert record is not None and record.job_train is not None
    assert (record.job_train.task_token, record.job_train.slurm_job_id) == ("token-2", 42)
