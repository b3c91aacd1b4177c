"""How the views group what a run did: a wait loop's visits, and its resources counted once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trainrun.ops.views import ResourceRow, Resources, StateTotal, StateVisit, resource_rows, state_totals

START = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)

CREATED = [
    "vpc vpc-1",
    "public-subnet subnet-1",
    "eip-allocation eipalloc-1",
    "s3-endpoint vpce-1",
    "file-system fs-1",
    "cluster trainrun-run-1",
]
# What carries the run's tag, as the inventory names it: other kinds, the same ids, and the cluster's nodes.
TAGGED = ["vpc vpc-1", "subnet subnet-1", "elastic-ip eipalloc-1", "vpc-endpoint vpce-1", "file-system fs-1"]
NODES = ["instance i-head", "instance i-compute"]


def visit(name: str, second: float, seconds: float | None) -> StateVisit:
    return StateVisit(name=name, entered_at=START + timedelta(seconds=second), seconds=seconds)


def test_a_wait_loop_is_one_row_per_state_with_its_visits_and_total_time() -> None:
    visits = [visit("Create network", 0, 1.0)]
    for round_ in range(40):
        visits += [visit("Network ready?", 1 + 2 * round_, 0.0), visit("Wait for network", 1 + 2 * round_, 2.0)]
    visits += [visit("Create file system", 90, 0.5), visit("Wait for file system", 91, None)]

    totals = state_totals(visits)

    assert totals == [
        StateTotal(name="Create network", first_entered_at=START, visits=1, seconds=1.0, running=False),
        StateTotal(
            name="Network ready?", first_entered_at=START + timedelta(seconds=1), visits=40, seconds=0.0, running=False
        ),
        StateTotal(
            name="Wait for network",
            first_entered_at=START + timedelta(seconds=1),
            visits=40,
            seconds=80.0,
            running=False,
        ),
        StateTotal(
            name="Create file system",
            first_entered_at=START + timedelta(seconds=90),
            visits=1,
            seconds=0.5,
            running=False,
        ),
        StateTotal(
            name="Wait for file system",
            first_entered_at=START + timedelta(seconds=91),
            visits=1,
            seconds=0.0,
            running=True,
        ),
    ]


def test_a_kept_run_leaves_behind_as_many_resources_as_it_created() -> None:
    rows = resource_rows(Resources(created=CREATED, remaining=TAGGED + NODES), torn_down=False)

    assert [(row.kind, row.id, row.left) for row in rows] == [
        (item.split()[0], item.split()[1], True) for item in CREATED
    ]
    assert sum(row.recorded for row in rows) == sum(row.left for row in rows) == len(CREATED)


def test_a_torn_down_run_has_every_resource_deleted() -> None:
    rows = resource_rows(Resources(created=CREATED, remaining=[]), torn_down=True)

    assert len(rows) == len(CREATED) and not any(row.left for row in rows)


def test_a_cluster_is_there_until_the_run_is_torn_down_and_then_while_its_instances_are() -> None:
    def cluster_left(remaining: list[str], *, torn_down: bool) -> bool:
        rows = resource_rows(Resources(created=CREATED, remaining=remaining), torn_down=torn_down)
        return next(row.left for row in rows if row.kind == "cluster")

    assert cluster_left([], torn_down=False)  # being created: no instance yet
    assert cluster_left(NODES, torn_down=True)  # torn down, but an instance is still there
    assert not cluster_left(TAGGED, torn_down=True)


def test_what_carries_the_runs_tag_without_being_recorded_is_listed_too() -> None:
    rows = resource_rows(
        Resources(created=["vpc vpc-1"], remaining=["vpc vpc-1", "subnet subnet-9", "instance i-9"]), torn_down=False
    )

    assert rows == [
        ResourceRow(kind="vpc", id="vpc-1", recorded=True, left=True),
        ResourceRow(kind="subnet", id="subnet-9", recorded=False, left=True),
        # Without a cluster of the run, an instance is a resource of its own
        ResourceRow(kind="instance", id="i-9", recorded=False, left=True),
    ]
