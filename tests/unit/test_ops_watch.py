"""`trainrun watch`: the frame drawn for a run, and the loop that polls it until the run settles."""

from __future__ import annotations

import io
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console

from trainrun.model.findings import Code, Finding, Severity
from trainrun.model.jobs import TrainPoint
from trainrun.model.run_record import RunStatus
from trainrun.ops.charts import BLOCKS, StepRate
from trainrun.ops.views import AttemptView, CompileProgress, Cost, Resources, RunProgress, RunView, TrainProgress
from trainrun.ops.watch import follow, observe_step, render

from .test_records import a_record

CREATED = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
LEFTOVERS = ["file-system fs-0123456789abcdef0", "vpc vpc-0abc"]


def at(seconds: float) -> datetime:
    return CREATED + timedelta(seconds=seconds)


def train(step: int, **overrides: Any) -> RunProgress:
    fields: dict[str, Any] = {
        "epoch": 1,
        "step": step,
        "loss": 2.125,
        "learning_rate": 0.0001,
        "throughput": 812.5,
        "checkpoints": 3,
    }
    return RunProgress(train=TrainProgress(**(fields | overrides)))


def make_view(**overrides: Any) -> RunView:
    fields: dict[str, Any] = {
        "run_id": "bert-7f3a",
        "name": "bert-large-phase1",
        "status": "RUNNING",
        "execution_status": "RUNNING",
        "current_state": "Wait for training",
        "run_file": "s3://trainrun-config/runs/bert.yaml",
        "created_at": CREATED,
        "ended_at": None,
        "torn_down_at": None,
        "kept_at": None,
        "taken_at": at(725),
        "nodes": 2,
        "instance_type": "trn1.32xlarge",
        "total_steps": None,
        "states": [],
        "findings": [],
        "resources": Resources(created=LEFTOVERS, remaining=LEFTOVERS),
        "progress": RunProgress(),
        "history": [],
        "train_submitted_at": None,
        "cost": None,
        "error": None,
    }
    return RunView(**(fields | overrides))


def ended(status: str, **overrides: Any) -> RunView:
    fields: dict[str, Any] = {
        "status": status,
        "execution_status": status,
        "current_state": None,
        "ended_at": at(3725),
        "taken_at": at(3800),
    }
    return make_view(**(fields | overrides))


def text_of(view: RunView, rate: StepRate | None = None) -> str:
    console = Console(record=True, width=100)
    console.print(render(view, rate))
    return console.export_text()


def line_of(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"{label} "))


def falling_history() -> list[TrainPoint]:
    return [
        TrainPoint(step=step, loss=10.0 - step / 200, learning_rate=0.0001, throughput=700.0 + step / 10)
        for step in range(0, 1201, 100)
    ]


def test_the_header_says_which_run_where_it_is_and_for_how_long() -> None:
    text = text_of(make_view())

    header = text.splitlines()[0]
    assert header.split() == [
        "bert-7f3a",
        "bert-large-phase1",
        "RUNNING",
        "Wait",
        "for",
        "training",
        "12m",
        "05s",
        "so",
        "far",
        "2",
        "x",
        "trn1.32xlarge",
    ]


def test_a_running_train_shows_progress_against_the_total_with_an_eta() -> None:
    rate = StepRate()
    rate.observe(at(625), 1000)
    rate.observe(at(725), 1200)
    view = make_view(total_steps=10_000, progress=train(1200), history=falling_history())

    text = text_of(view, rate)

    train_line, eta_line = line_of(text, "train"), line_of(text, "ETA")
    assert train_line.split() == ["train", "━━━━╸", "step", "1,200/10,000", "12.0%", "epoch", "1"]
    # (10,000 - 1,200) steps at 2 steps/s: 4,400 s.
    assert eta_line.split() == ["ETA", "1h", "13m", "at", "2", "steps/s"]
    assert line_of(text, "loss").split() == ["loss", "█▇▇▆▆▅▅▄▃▃▂▂▁", "2.125"]
    assert line_of(text, "throughput").split() == ["throughput", "▁▂▂▃▃▄▅▅▆▆▇▇█", "812.5/s"]
    assert line_of(text, "learning rate").split() == ["learning", "rate", "0.0001"]
    assert line_of(text, "checkpoints").split() == ["checkpoints", "3"]


def test_the_loss_sparkline_falls_as_the_loss_falls() -> None:
    text = text_of(make_view(progress=train(1200), history=falling_history()))

    blocks = [BLOCKS.index(block) for block in line_of(text, "loss").split()[1]]
    assert blocks == sorted(blocks, reverse=True)
    assert blocks[0] == len(BLOCKS) - 1 and blocks[-1] == 0


def test_without_a_total_the_train_line_shows_the_step_and_the_rate_but_no_percentage() -> None:
    rate = StepRate()
    rate.observe(at(625), 1000)
    rate.observe(at(725), 1200)

    text = text_of(make_view(progress=train(1200)), rate)

    assert line_of(text, "train").split() == ["train", "step", "1,200", "epoch", "1"]
    assert line_of(text, "rate").split() == ["rate", "2", "steps/s"]
    assert "%" not in text and "ETA" not in text and "━" not in text


def test_a_single_look_takes_the_rate_since_the_train_job_was_submitted() -> None:
    # Submitted at 125 s, step 1,200 at 725 s: 2 steps/s.
    view = make_view(total_steps=10_000, progress=train(1200), train_submitted_at=at(125))

    assert line_of(text_of(view), "ETA").split() == ["ETA", "1h", "13m", "at", "2", "steps/s"]


def test_an_unknown_rate_says_so() -> None:
    text = text_of(make_view(total_steps=10_000, progress=train(1200)))

    assert line_of(text, "ETA").split() == ["ETA", "unknown", "(no", "rate", "yet)"]


def test_a_compile_shows_the_graphs_compiled_and_failed() -> None:
    view = make_view(
        current_state="Wait for compilation",
        progress=RunProgress(compile=CompileProgress(graphs=12, succeeded=10, failed=1)),
    )

    text = text_of(view)

    # 11 of 12 graphs done (compiled or failed): the bar is 11/12 of CHART_WIDTH, ending in a half block.
    assert line_of(text, "compile").split() == [
        "compile",
        "━" * 36 + "╸",
        "10/12",
        "graphs",
        "compiled,",
        "1",
        "failed",
    ]
    assert "train" not in text


def test_a_compile_that_found_its_graphs_in_the_cache_says_how_many_it_compiled() -> None:
    compiled = CompileProgress(graphs=3, succeeded=3, failed=0, cache_hits=2)
    text = text_of(make_view(current_state="Wait for compilation", progress=RunProgress(compile=compiled)))

    assert " ".join(line_of(text, "compile").split()[2:]) == "3/3 graphs ready: 1 compiled, 2 cached"


def test_the_cost_is_labelled_an_estimate() -> None:
    cost = Cost(per_hour=43.92, so_far=8.85, hours=0.2, billable_since=at(0), partial=True, prices_as_of="2026-11-01")

    text = text_of(make_view(cost=cost))

    assert (
        "$8.85 so far, $43.92/hour (estimate, prices as of 2026-11-01); some items have no price and are left out"
        in " ".join(text.split())
    )


def test_a_run_with_a_budget_shows_how_much_of_it_is_spent() -> None:
    cost = Cost(per_hour=43.92, so_far=8.85, hours=0.2, billable_since=at(0), partial=False, prices_as_of="2026-11-01")

    text = " ".join(text_of(make_view(cost=cost.model_copy(update={"budget_usd": 10.0}))).split())

    assert "$8.85 so far, $43.92/hour (estimate, prices as of 2026-11-01); budget $10.00, 88% spent" in text
    assert "budget" not in " ".join(text_of(make_view(cost=cost)).split())


def test_a_run_with_nothing_billable_shows_no_cost() -> None:
    nothing = Cost(per_hour=43.92, so_far=0.0, hours=0.0, partial=False, prices_as_of="2026-11-01")

    running, rejected = text_of(make_view(cost=nothing)), text_of(ended("REJECTED", cost=nothing))

    assert " ".join(line_of(running, "cost").split()) == "cost nothing billable yet"
    assert " ".join(line_of(rejected, "cost").split()) == "cost none: nothing billable was created"
    assert "$" not in running + rejected


def test_a_failed_run_shows_its_error_and_what_it_left_behind() -> None:
    view = ended(
        "FAILED",
        execution_status="TIMED_OUT",
        error={"error": "States.Timeout", "cause": "training ran past [max_runtime] 1h"},
    )

    text = text_of(view)

    assert text.splitlines()[0].split()[:5] == ["bert-7f3a", "bert-large-phase1", "FAILED", "(execution", "TIMED_OUT)"]
    assert "took 1h 02m" in text
    assert line_of(text, "error").split(maxsplit=1) == ["error", "States.Timeout: training ran past [max_runtime] 1h"]


def test_a_lambda_errors_row_is_its_message_not_its_json_and_stack_trace() -> None:
    cause = json.dumps(
        {
            "errorMessage": "cluster c is CREATE_FAILED: HeadNodeBootstrapFailure",
            "errorType": "ClusterCreateFailed",
            "stackTrace": ['  File "/var/task/app.py", line 9, in handler\n', "    raise ClusterCreateFailed(...)\n"],
        }
    )
    text = text_of(ended("FAILED", error={"error": "ClusterCreateFailed", "cause": cause}))

    error_rows = text[text.index("error") : text.index("resources")].splitlines()
    assert [" ".join(line.split()) for line in error_rows] == [
        "error ClusterCreateFailed: cluster c is CREATE_FAILED: HeadNodeBootstrapFailure"
    ]


def test_a_rejected_run_says_why_with_each_finding_that_rejected_it_and_its_fix() -> None:
    # Given a run Validate capacity rejected (no error, only findings), with a warning beside them
    findings = [
        Finding(code=Code.CAPACITY_RESERVATION_NOT_FOUND, severity=Severity.ERROR, message="cr-1 is not there; fix"),
        Finding(code=Code.ENVIRONMENT_VARIABLE_RISKY, severity=Severity.WARNING, message="workload.env.X: risky"),
    ]
    # When its last frame is drawn
    text = text_of(ended("REJECTED", findings=findings))
    # Then it says why, the error findings only
    assert line_of(text, "rejected").split(None, 1)[1] == "CAPACITY_RESERVATION_NOT_FOUND: cr-1 is not there; fix"
    assert "risky" not in text


def test_a_cancelled_run_says_who_cancelled_it_not_an_error() -> None:
    cause = "cancelled by ops with `trainrun cancel` at 2026-11-21 13:00:00 UTC"
    text = text_of(ended("CANCELLED", error={"error": "Cancelled", "cause": cause}))

    assert "CANCELLED" in text.splitlines()[0]
    assert " ".join(line_of(text, "ended").split()) == f"ended {cause}"
    assert "error" not in text
    resources = text[text.index("resources") :].splitlines()
    assert [line.split() for line in resources] == [["resources", "tearing", "down,", "2", "left"]] + [
        leftover.split() for leftover in LEFTOVERS
    ]


def test_leftovers_after_teardown_are_told_apart_from_kept_ones() -> None:
    torn_down = text_of(ended("FAILED", torn_down_at=at(3790)))
    kept = text_of(ended("SUCCEEDED", kept_at=at(3790)))

    assert " ".join(line_of(torn_down, "resources").split()) == "resources 2 still tagged with the run after teardown"
    assert " ".join(line_of(kept, "resources").split()) == "resources 2 kept on purpose (teardown: keep)"


def test_a_succeeded_run_with_nothing_left_says_so() -> None:
    view = ended(
        "SUCCEEDED",
        total_steps=10_000,
        progress=train(10_000),
        resources=Resources(created=LEFTOVERS, remaining=[]),
        torn_down_at=at(3790),
    )

    text = text_of(view)

    assert "SUCCEEDED" in text.splitlines()[0]
    assert line_of(text, "resources").split() == ["resources", "nothing", "left"]
    assert "step 10,000/10,000  100.0%" in line_of(text, "train")
    assert "ETA" not in text and "error" not in text


NODE_LOST = AttemptView(
    number=1,
    slurm_job_id=41,
    started_at=at(60),
    ended_at=at(300),
    state="NODE_FAIL",
    why="Slurm ended the job NODE_FAIL: a node of the job failed",
    first_step=1,
    last_step=22,
)


def test_a_resubmission_shows_its_attempt_where_it_resumed_and_why_the_one_before_ended() -> None:
    # Given a train job resubmitted after a node failure, resumed from the checkpoint of step 20
    resumed = AttemptView(number=2, slurm_job_id=42, started_at=at(400), first_step=21, last_step=30)
    progress = train(30, attempts=2, attempt_history=[NODE_LOST, resumed])
    text = text_of(make_view(progress=progress, total_steps=40, train_submitted_at=at(400)))
    # Then the bar is at the highest step, and the attempt row tells the story
    assert "step 30/40" in line_of(text, "train")
    words = " ".join(text.split())
    assert "attempt 2 of the train job, resumed at step 21" in words
    assert "attempt 1 (steps 1-22) ended: Slurm ended the job NODE_FAIL: a node of the job failed" in words


def test_a_failed_attempt_waiting_for_its_resubmission_is_shown_and_a_single_attempt_is_not() -> None:
    waiting = text_of(make_view(progress=train(22, attempt_history=[NODE_LOST])))
    assert "attempt 1 (steps 1-22) ended: Slurm ended the job NODE_FAIL" in " ".join(waiting.split())
    once = AttemptView(number=1, slurm_job_id=41, started_at=at(60), first_step=1, last_step=22)
    assert "attempt" not in text_of(make_view(progress=train(22, attempt_history=[once])))


def test_a_resubmitted_train_job_starts_a_new_rate() -> None:
    first = observe_step(None, make_view(progress=train(100), train_submitted_at=at(0), taken_at=at(100)))
    same = observe_step(first, make_view(progress=train(300), train_submitted_at=at(0), taken_at=at(200)))
    resubmitted = observe_step(same, make_view(progress=train(50), train_submitted_at=at(400), taken_at=at(450)))

    assert same is first and same.steps_per_second == pytest.approx(2.0)
    assert resubmitted is not first and resubmitted.steps_per_second == pytest.approx(1.0)


class FakeTime:
    """A clock that only moves when the loop sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_follow_polls_until_the_run_has_ended_and_is_torn_down() -> None:
    settled = ended(
        "SUCCEEDED", progress=train(140), taken_at=at(745), resources=Resources(created=LEFTOVERS, remaining=[])
    )
    views = [
        make_view(progress=train(100), taken_at=at(725)),
        make_view(progress=train(120), taken_at=at(735)),
        ended("SUCCEEDED", progress=train(140), taken_at=at(740)),  # ended, teardown still going
        settled,
    ]
    polls = iter(views)
    time = FakeTime()
    console = Console(record=True, width=100)

    last = follow(lambda: next(polls), console, interval=5.0, clock=time.clock, sleep=time.sleep)

    assert last is settled
    assert time.sleeps == [5.0, 5.0, 5.0]
    text = console.export_text()
    assert "SUCCEEDED" in text.splitlines()[0]
    assert line_of(text, "resources").split() == ["resources", "nothing", "left"]


def test_follow_shows_the_step_rate_it_observed_across_polls() -> None:
    # Three polls ten seconds apart, 20 steps each: 2 steps/s, which no single view could tell.
    polls = iter(
        [
            make_view(progress=train(step), taken_at=at(seconds))
            for seconds, step in [(725, 100), (735, 120), (745, 140)]
        ]
    )
    time = FakeTime()
    console = Console(record=True, width=100)

    with pytest.raises(TimeoutError):
        follow(lambda: next(polls), console, interval=5.0, timeout=10.0, clock=time.clock, sleep=time.sleep)

    assert line_of(console.export_text(), "rate").split() == ["rate", "2", "steps/s"]


def test_follow_stops_at_a_kept_run_even_with_resources_left() -> None:
    kept = ended("FAILED", kept_at=at(3790))
    time = FakeTime()

    last = follow(lambda: kept, Console(record=True, width=100), clock=time.clock, sleep=time.sleep)

    assert last is kept
    assert time.sleeps == []


def test_follow_leaves_stdout_alone_on_a_terminal() -> None:
    # What is written to stdout while the view is live (the local runtime's functions print their
    # metrics there, for the runtime to keep) must not be printed into the view.
    stdout = sys.stdout
    seen = []

    def fetch() -> RunView:
        seen.append(sys.stdout)
        return ended("SUCCEEDED", kept_at=at(3790))

    follow(fetch, Console(force_terminal=True, record=True, width=100), sleep=FakeTime().sleep)

    assert seen == [stdout] and sys.stdout is stdout


@pytest.mark.parametrize("terminal", [True, False])
def test_the_last_frame_ends_with_a_newline_on_a_terminal_or_not(terminal: bool) -> None:
    file = io.StringIO()
    console = Console(file=file, force_terminal=terminal, width=100)

    follow(lambda: ended("SUCCEEDED", kept_at=at(3790)), console, sleep=FakeTime().sleep)

    # (on a terminal, escape sequences show the cursor again after it)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", file.getvalue())
    assert "SUCCEEDED" in shown and shown.endswith("\n") and not shown.endswith("\n\n")


def test_follow_gives_up_past_the_timeout() -> None:
    time = FakeTime()

    with pytest.raises(TimeoutError, match="bert-7f3a has not settled after 5 seconds"):
        follow(
            lambda: make_view(),
            Console(record=True, width=100),
            interval=2.0,
            timeout=5.0,
            clock=time.clock,
            sleep=time.sleep,
        )

    assert time.sleeps == [2.0, 2.0, 1.0]


def test_a_train_job_without_progress_shows_the_notice_instead_of_a_train_row() -> None:
    # Given a train job that printed many lines and none carried progress
    notice = "the train job printed 120 lines and none carried training progress (step, loss): trainrun reads ..."
    view = make_view(progress=RunProgress(train_notice=notice))
    # Then the view says so where the train row would be
    assert "none carried training progress" in line_of(text_of(view), "train")


class _Stack:
    """A stack whose run has no execution yet: only the inventory's clients are asked for."""

    def client(self, service: str) -> str:
        return service


@pytest.mark.parametrize(
    ("status", "inventory_while_running", "looked_up"),
    [
        (RunStatus.RUNNING, False, False),  # watch's polls while the run runs
        (RunStatus.RUNNING, True, True),  # status: a single look lists what exists now
        (RunStatus.FAILED, False, True),  # watch's frames once the run has ended: what is left
    ],
)
def test_the_live_view_takes_the_inventory_once_the_run_has_ended(
    monkeypatch: pytest.MonkeyPatch, status: RunStatus, inventory_while_running: bool, looked_up: bool
) -> None:
    from trainrun.adapters.inventory import TaggedResource
    from trainrun.ops import runs

    looks: list[tuple[str, str, str | None]] = []

    def inventory(ec2: str, fsx: str, *, key: str, value: str, eks: str | None = None) -> list[TaggedResource]:
        looks.append((ec2, fsx, eks))
        return [TaggedResource(kind="vpc", id="vpc-0abc", run_id=value)]

    monkeypatch.setattr(runs, "tagged_resources", inventory)
    record = a_record(status=status)
    view = runs.build_view(_Stack(), record, now=at(60), inventory_while_running=inventory_while_running)  # type: ignore[arg-type]
    # (with EKS: an EKS run's cluster is among what a run leaves)
    assert looks == ([("ec2", "fsx", "eks")] if looked_up else [])
    assert view.resources.remaining == (["vpc vpc-0abc"] if looked_up else [])
