"""The cost so far of a run: each billable resource counted from its creation to the run's teardown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from trainrun.model.resources import ClusterRef, NetworkIds, StorageIds
from trainrun.model.run_file import parse_run_file
from trainrun.model.run_record import Billed, RunFileRef, RunRecord, RunStatus, RunStore
from trainrun.ops.plan import estimate_cost
from trainrun.ops.runs import cost_so_far

pytestmark = pytest.mark.usefixtures("no_network")

ROOT = Path(__file__).resolve().parents[2]
CREATED = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
SPEC = parse_run_file((ROOT / "examples" / "bert-large-phase1.yaml").read_text())
BUDGETED = (ROOT / "examples" / "bert-large-phase1.yaml").read_text() + "budget: {max_cost_usd: 5000}\n"


def at(minutes: float) -> datetime:
    return CREATED + timedelta(minutes=minutes)


def record(**fields: Any) -> RunRecord:
    return RunRecord(
        run_id="bert-1", run_file=RunFileRef(bucket="b", key="k"), created_at=CREATED, updated_at=CREATED, **fields
    )


def per_hour(billed: Billed) -> float:
    return sum(line.per_hour or 0.0 for line in estimate_cost(SPEC).lines if line.billed == billed)


def test_a_run_rejected_before_creating_anything_costs_nothing() -> None:
    rejected = record(status=RunStatus.REJECTED, ended_at=at(1))

    cost = cost_so_far(rejected, SPEC, at(90), billing=False)

    assert cost is not None and (cost.so_far, cost.hours, cost.billable_since) == (0.0, 0.0, None)
    assert cost.per_hour == estimate_cost(SPEC).per_hour  # what it would cost with everything up


def test_each_resource_counts_from_its_creation_to_the_teardown() -> None:
    # Given a run whose NAT gateway came at 2 min, its file system at 5 and its cluster at 20, torn down at 80
    torn_down = record(
        nat_gateway_since=at(2), file_system_since=at(5), cluster_since=at(20), ended_at=at(75), torn_down_at=at(80)
    )

    cost = cost_so_far(torn_down, SPEC, at(500), billing=False)

    expected = (
        per_hour(Billed.NAT_GATEWAY) * 78 / 60
        + per_hour(Billed.FILE_SYSTEM) * 75 / 60
        + per_hour(Billed.CLUSTER) * 60 / 60
    )
    assert cost is not None and cost.so_far == pytest.approx(expected, abs=0.01)
    assert (cost.hours, cost.billable_since) == (1.3, at(2))


def test_while_anything_of_the_run_is_left_it_counts_to_now() -> None:
    kept = record(cluster_since=at(20), ended_at=at(75), kept_at=at(76))

    cost = cost_so_far(kept, SPEC, at(140), billing=True)

    assert cost is not None and cost.so_far == pytest.approx(per_hour(Billed.CLUSTER) * 2, abs=0.01)


def test_the_store_records_when_each_billable_resource_was_first_recorded(store: RunStore) -> None:
    assert store.create(record())
    # A reused network and file system are not the run's to bill
    store.set_network("bert-1", NetworkIds(created=False, vpc_id="vpc-1", nat_gateway_id="nat-1"))
    store.set_storage("bert-1", StorageIds(created=False, file_system_id="fs-1"))
    # A network without its NAT gateway yet bills nothing
    store.set_network("bert-1", NetworkIds(vpc_id="vpc-2"))
    reused = store.get("bert-1")
    assert reused is not None and [reused.billed_since(billed) for billed in Billed] == [None, None, None]
    # The run's own do, from their first record on; later writes keep that time
    store.set_network("bert-1", NetworkIds(vpc_id="vpc-2", nat_gateway_id="nat-2"))
    store.set_storage("bert-1", StorageIds(file_system_id="fs-2"))
    store.set_cluster("bert-1", ClusterRef(name="c", region="us-west-2", status="CREATE_IN_PROGRESS"))
    first = store.get("bert-1")
    assert first is not None
    store.set_cluster("bert-1", ClusterRef(name="c", region="us-west-2", status="CREATE_COMPLETE"))
    store.set_network("bert-1", NetworkIds(vpc_id="vpc-2", nat_gateway_id="nat-2", s3_endpoint_id="vpce-2"))
    later = store.get("bert-1")
    assert later is not None
    since = [first.billed_since(billed) for billed in Billed]
    assert None not in since and since == sorted(since)  # recorded in the order they were created
    assert [later.billed_since(billed) for billed in Billed] == since


def test_the_cost_carries_the_runs_budget_so_the_views_can_say_how_much_is_spent() -> None:
    # Given a run with a budget, whose cluster has billed for an hour
    budgeted = SPEC.model_copy(update={"budget": parse_run_file(BUDGETED).budget})
    running = record(cluster_since=at(0))
    # When its cost is worked out
    cost = cost_so_far(running, budgeted, at(60), billing=True)
    # Then it names the budget, and without one it names none
    assert cost is not None and cost.budget_usd == 5000.0
    assert cost.budget_words() == f"budget $5,000.00, {cost.so_far / 5000:.0%} spent"
    unbudgeted = cost_so_far(running, SPEC, at(60), billing=True)
    assert unbudgeted is not None and unbudgeted.budget_usd is None and unbudgeted.budget_words() is None
