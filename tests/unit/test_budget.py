"""The budget guard: `budget.max_cost_usd` validated, shown against the plan's estimate, and
enforced by Check compile / Check train (a warning once at 80%, at 100% the job stopped with its
grace period and BudgetExceeded)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from trainrun.logic.cost import BUDGET_WARNING_FRACTION, BudgetLevel, budget_level, estimate_cost, spent
from trainrun.logic.head_node_scripts import SLURM_KILL_WAIT_SECONDS
from trainrun.model.jobs import JobRecord
from trainrun.model.resources import ClusterRef, Progress
from trainrun.model.run_file import MAX_RUNTIME_SECONDS, MIN_RUNTIME_SECONDS, RunSpec, parse_run_file
from trainrun.model.run_record import Billed, RunFileRef, RunRecord, RunStore
from trainrun.ops.plan import build_plan, render_text
from trainrun.steps.budget import BudgetExceeded
from trainrun.steps.head_node import JobRequest, check_job
from trainrun.steps.run import job_wait_seconds

from .test_job_steps import FakeSsm, no_sleep, success
from .test_provisioning import (
    RUN,
    FakePclusterApi,
    cluster_ids,
    cluster_step,
    given_run,
)
from .test_run_events import CapturedBus, publisher
from .test_runfile import assert_problem, parse, problems_of, valid_document, with_value

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "single-node-0123456789ab"
RUNNING = "TRAINRUN-JOB-STATE slurm_job_id=42 state=RUNNING exit_code=-1\n"
CANCELLED = "TRAINRUN-JOB-STATE slurm_job_id=42 state=CANCELLED exit_code=0\n"


def single_node(budget: float | None) -> RunSpec:
    document = yaml.safe_load((ROOT / "examples" / "single-node.yaml").read_text())
    if budget is not None:
        document["budget"] = {"max_cost_usd": budget}
    return parse_run_file(yaml.safe_dump(document))


# --- the run file -------------------------------------------------------------------------------


def test_a_run_file_without_a_budget_has_none() -> None:
    assert parse(valid_document()).budget is None


@pytest.mark.parametrize("value", [5000, 12.5, 0.01])
def test_a_positive_number_of_dollars_is_a_budget(value: float) -> None:
    budget = parse(with_value("budget.max_cost_usd", value)).budget
    assert budget is not None and budget.max_cost_usd == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "0 is not a cost: give the most the run may cost in US dollars, such as 5000"),
        (-3, "-3 is not a cost: give the most the run may cost in US dollars, such as 5000"),
        ("5000", "'5000' is text, because of its quotes, not a number: remove the quotes (max_cost_usd: 5000)"),
        ("lots", "'lots' is not a number"),
        (True, "true is not a number"),
        (float("inf"), ".inf is not a finite number: give one such as 5000"),
        (None, "has no value: give a number"),
    ],
)
def test_a_budget_that_is_not_a_positive_number_says_the_field_the_value_and_the_fix(value: Any, message: str) -> None:
    assert_problem(problems_of(with_value("budget.max_cost_usd", value)), "budget.max_cost_usd", message)


def test_a_budget_needs_max_cost_usd_and_knows_no_other_field() -> None:
    assert_problem(problems_of(with_value("budget", {})), "budget.max_cost_usd", "is required")
    assert_problem(problems_of(with_value("budget.max_cost", 5)), "budget.max_cost", "did you mean 'max_cost_usd'?")


# --- the plan -----------------------------------------------------------------------------------


def test_the_plan_warns_when_the_budget_cannot_cover_max_runtime() -> None:
    # Given the single-node example (max_runtime 30m) with a budget for about a quarter of it
    estimate = estimate_cost(single_node(None))
    spec = single_node(round(estimate.for_max_runtime / 4, 2))
    # When it is planned
    plan = build_plan(spec)
    # Then the estimate has the budget, how long it lasts and that it falls short, and the text warns
    assert plan.cost.budget is not None and not plan.cost.budget.covers_max_runtime
    assert plan.cost.budget.hours == pytest.approx(0.5 / 4, abs=0.001)
    text = render_text(plan)
    assert "budget (budget.max_cost_usd)" in text
    assert "WARNING: the budget does not cover max_runtime (30m" in text
    assert "about 8 minutes of the run" in text and "BudgetExceeded" in text


def test_the_plan_says_a_budget_that_covers_max_runtime_does() -> None:
    estimate = estimate_cost(single_node(None))
    plan = build_plan(single_node(round(estimate.for_max_runtime * 2, 2)))
    assert plan.cost.budget is not None and plan.cost.budget.covers_max_runtime
    text = render_text(plan)
    assert "The budget covers max_runtime (30m)" in text and "WARNING" not in text


def test_a_plan_without_a_budget_shows_none() -> None:
    plan = build_plan(single_node(None))
    assert plan.cost.budget is None
    assert "budget" not in render_text(plan).lower()


def test_the_json_plan_carries_the_budget() -> None:
    document = build_plan(single_node(1.0)).model_dump(mode="json")
    assert set(document["cost"]["budget"]) == {"max_cost_usd", "hours", "covers_max_runtime"}


# --- the cost so far and its levels ---------------------------------------------------------------


def test_the_levels_are_within_nearly_spent_from_80_percent_and_spent_from_100_percent() -> None:
    assert BUDGET_WARNING_FRACTION == 0.8
    assert budget_level(79.99, 100) == BudgetLevel.WITHIN
    assert budget_level(80, 100) == BudgetLevel.NEARLY_SPENT
    assert budget_level(99.99, 100) == BudgetLevel.NEARLY_SPENT
    assert budget_level(100, 100) == BudgetLevel.SPENT


def test_with_a_budget_the_job_state_times_out_every_heartbeat_period_without_at_max_runtime() -> None:
    # The single-node example's max_runtime is 30m
    assert job_wait_seconds(single_node(None), 600)["job_timeout_seconds"] == 1800
    assert job_wait_seconds(single_node(100), 600)["job_timeout_seconds"] == 600
    assert job_wait_seconds(single_node(100), 3600)["job_timeout_seconds"] == 1800


def test_the_job_state_keeps_the_stacks_heartbeat_when_it_is_below_the_timeout() -> None:
    # Given no budget and max_runtime 30m, over the 600 s heartbeat
    # When the job states' wait is set
    # Then the heartbeat is the stack's
    assert job_wait_seconds(single_node(None), 600) == {"job_timeout_seconds": 1800, "job_heartbeat_seconds": 600}


def test_with_a_budget_the_heartbeat_is_a_second_under_the_heartbeat_long_timeout() -> None:
    # Given a budget, so the timeout is one heartbeat period (600 s)
    # When the job states' wait is set
    # Then the heartbeat is 599 s: Step Functions fails an execution whose heartbeat is not below its timeout
    assert job_wait_seconds(single_node(100), 600) == {"job_timeout_seconds": 600, "job_heartbeat_seconds": 599}


SPECS = {None: single_node(None), 100.0: single_node(100)}


def with_max_runtime(spec: RunSpec, seconds: int) -> RunSpec:
    return spec.model_copy(update={"workload": spec.workload.model_copy(update={"max_runtime": f"{seconds}s"})})


@given(
    max_runtime=st.integers(MIN_RUNTIME_SECONDS, MAX_RUNTIME_SECONDS),
    heartbeat=st.integers(60, 3600),
    budget=st.sampled_from([None, 100.0]),
)
def test_the_job_states_heartbeat_is_always_a_positive_integer_below_the_timeout(
    max_runtime: int, heartbeat: int, budget: float | None
) -> None:
    # Given any max_runtime the run file allows, any JobHeartbeatSeconds the template allows, a budget or none
    spec = with_max_runtime(SPECS[budget], max_runtime)
    # When the job states' wait is set
    wait = job_wait_seconds(spec, heartbeat)
    # Then the heartbeat is below the timeout (the States Language's rule), never over the stack's,
    # and the timeout never over max_runtime, nor with a budget over a heartbeat period
    assert 1 <= wait["job_heartbeat_seconds"] < wait["job_timeout_seconds"] <= max_runtime
    assert wait["job_heartbeat_seconds"] <= heartbeat
    if budget is not None:
        assert wait["job_timeout_seconds"] <= heartbeat


# --- the guard, in Check ------------------------------------------------------------------------


@pytest.fixture
def budget_run(store: RunStore) -> RunStore:
    """The single-node run with a $10 budget, its cluster up and its train job running."""
    spec = single_node(10)
    now = datetime.now().astimezone()
    store.create(RunRecord(run_id=RUN_ID, run_file=RunFileRef(bucket="c", key="k"), created_at=now, updated_at=now))
    store.set_spec(RUN_ID, spec)
    store.set_cluster(RUN_ID, ClusterRef(name=f"trainrun-{RUN_ID}", region="us-west-2", head_node_instance_id="i-0abc"))
    store.set_job(RUN_ID, "train", JobRecord(task_token="t", slurm_job_id=42, submitted_at=now))
    return store


def when_spent(store: RunStore, fraction: float) -> datetime:
    """The moment the run's cost so far reaches `fraction` of its budget (only its cluster bills)."""
    record = store.get(RUN_ID)
    assert record is not None and record.spec is not None and record.spec.budget is not None
    since = record.billed_since(Billed.CLUSTER)
    assert since is not None
    per_hour = sum(line.per_hour or 0.0 for line in estimate_cost(record.spec).lines if line.billed == Billed.CLUSTER)
    moment = since + timedelta(hours=fraction * record.spec.budget.max_cost_usd / per_hour)
    assert spent(estimate_cost(record.spec), record, moment) == pytest.approx(fraction * 10)
    return moment


def check(store: RunStore, ssm: FakeSsm, bus: CapturedBus, now: datetime) -> Any:
    request = JobRequest(run_id=RUN_ID, job="train")
    return check_job(ssm, store, request, run_events=publisher(bus), sleep=no_sleep, now=now)


def test_below_80_percent_a_check_says_nothing_and_stops_nothing(budget_run: RunStore) -> None:
    bus, ssm = CapturedBus(), FakeSsm([success(RUNNING)])
    result = check(budget_run, ssm, bus, when_spent(budget_run, 0.79))
    assert not result.finished and bus.states == [] and len(ssm.sent) == 1


def test_from_80_percent_the_run_event_warns_once(budget_run: RunStore) -> None:
    # Given checks at 81% and 95% of the budget
    bus, ssm = CapturedBus(), FakeSsm([success(RUNNING)] * 2)
    for fraction in (0.81, 0.95):
        result = check(budget_run, ssm, bus, when_spent(budget_run, fraction))
        assert not result.finished
    # Then one budget_warning, which says how much is spent, and no stop (only the status scripts)
    assert bus.states == ["budget_warning"]
    assert "is 81% of budget.max_cost_usd ($10.00)" in bus.details[0]["detail"]
    assert len(ssm.sent) == 2 and all(script.startswith("# trainrun: the state of") for script in ssm.sent)
    record = budget_run.get(RUN_ID)
    assert record is not None and record.budget_warned_at is not None


def test_at_100_percent_the_job_is_stopped_with_its_grace_period_and_the_run_fails_budget_exceeded(
    budget_run: RunStore,
) -> None:
    # Given a check when the budget is spent, the job still running; the stop script then finds it CANCELLED
    bus, ssm = CapturedBus(), FakeSsm([success(RUNNING), success(CANCELLED)])
    # When it checks
    with pytest.raises(BudgetExceeded) as raised:
        check(budget_run, ssm, bus, when_spent(budget_run, 1.01))
    # Then it sent the stop script (scancel without --signal: SIGTERM, then KillWait) after the status
    status, stop = ssm.sent
    assert status.startswith("# trainrun: the state of Slurm job 42.")
    assert stop.startswith("# trainrun: stop Slurm job 42.") and 'scancel "$slurm_job_id"' in stop
    assert "scancel --" not in stop
    # and the error says what was spent, the grace the job had and how it ended
    message = str(raised.value)
    assert "is 101% of budget.max_cost_usd ($10.00)" in message
    assert f"up to {SLURM_KILL_WAIT_SECONDS} s (Slurm's KillWait)" in message
    assert "ended CANCELLED with exit code 0" in message
    # and the warning that had not been given yet was given on the way
    assert bus.states == ["budget_warning"]


def test_a_finished_job_is_not_stopped_whatever_the_budget(budget_run: RunStore) -> None:
    bus, ssm = CapturedBus(), FakeSsm([success("TRAINRUN-JOB-STATE slurm_job_id=42 state=COMPLETED exit_code=0\n")])
    result = check(budget_run, ssm, bus, when_spent(budget_run, 2.0))
    assert result.finished and len(ssm.sent) == 1


def test_a_run_without_a_budget_is_never_stopped_for_its_cost(budget_run: RunStore) -> None:
    budget_run.set_spec(RUN_ID, single_node(None))
    bus, ssm = CapturedBus(), FakeSsm([success(RUNNING)])
    record = budget_run.get(RUN_ID)
    assert record is not None and record.cluster_since is not None
    result = check(budget_run, ssm, bus, record.cluster_since + timedelta(minutes=29))
    assert not result.finished and bus.states == [] and len(ssm.sent) == 1


# --- while the cluster is created ---------------------------------------------------------------


def test_create_cluster_holds_the_budget_while_the_cluster_is_created(store: RunStore) -> None:
    # Given a run with a $10 budget whose cluster creation has begun (it bills from then on)
    api = FakePclusterApi()
    given_run(store, budget={"max_cost_usd": 10})
    cluster_ids(store)
    bus = CapturedBus()
    assert cluster_step(api, store, run_events=publisher(bus)).done is False
    record = store.get(RUN)
    assert record is not None and record.spec is not None and record.cluster_since is not None
    estimate = estimate_cost(record.spec)
    # What the run's billing resources (its network, file system and cluster) cost an hour
    per_hour = sum(line.per_hour or 0.0 for line in estimate.lines if record.billed_since(line.billed) is not None)

    def look_after(hours: float) -> Progress:
        return cluster_step(api, store, run_events=publisher(bus), now=record.cluster_since + timedelta(hours=hours))

    # When it is still being created once 85% of the budget is spent, Then it waits on, with the warning
    nearly = 0.85 * 10 / per_hour
    assert 0.8 <= spent(estimate, record, record.cluster_since + timedelta(hours=nearly)) / 10 < 1
    assert look_after(nearly).done is False
    assert bus.states == ["budget_warning"]
    # When the whole budget is spent before it is complete, Then the run fails BudgetExceeded, saying so
    with pytest.raises(
        BudgetExceeded, match=r"of budget.max_cost_usd \(\$10.00\), while cluster .* CREATE_IN_PROGRESS"
    ):
        look_after(1.01 * 10 / per_hour)
    # and the warning is not given twice
    assert bus.states == ["budget_warning"]
