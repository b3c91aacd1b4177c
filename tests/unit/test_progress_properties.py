"""Properties of the progress handler: any order and duplication of one job log's batches."""

from __future__ import annotations

import itertools
from typing import Any

from aws_lambda_powertools import Metrics
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainrun.logic.job_log import JobLogSummary
from trainrun.model.jobs import JobProgress
from trainrun.model.run_record import RunRecord, RunStore
from trainrun.steps.progress import LogBatch, LogEvent, apply_batch

from .test_progress import NOW, RUN_FILE, FakeSfn, event_id, fixture_lines, train_lines

# One job log: the real training output, a second rank's lines interleaved (lower steps later),
# noise, garbage and multi-line events.
LOG = [
    *fixture_lines("train_bert_ok.out")[:-1],
    *train_lines([7, 3, 41, 42]),
    "\x00\xff binary \ufffd",
    "Checkpointing done\nBegin epoch 1\n",
    *train_lines([43, 44]),
]
_run_ids = itertools.count()


def max_step(events: list[LogEvent]) -> int | None:
    steps = [s.train.step for e in events if (s := JobLogSummary().feed_text(e.message)).train is not None]
    return max(steps, default=None)


def lines_of(events: list[LogEvent]) -> int:
    return sum(JobLogSummary().feed_text(e.message.removesuffix("\n")).lines for e in events)


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[list[LogEvent]], list[int]]:
    """The log cut into batches of consecutive events, and an order of delivery with duplicates."""
    events = [
        LogEvent(id=event_id(1000 + i), timestamp=1692895000000 + i, message=message) for i, message in enumerate(LOG)
    ]
    cuts = sorted(draw(st.sets(st.integers(1, len(events) - 1), max_size=8)))
    batches = [events[a:b] for a, b in itertools.pairwise([0, *cuts, len(events)])]
    order = draw(st.permutations(range(len(batches))))
    duplicates = draw(st.lists(st.integers(0, len(batches) - 1), max_size=6))
    sequence = list(order)
    for index, batch in enumerate(duplicates):
        sequence.insert(draw(st.integers(0, len(sequence))) if index % 2 else len(sequence), batch)
    return batches, sequence


def given_fresh_run(store: RunStore) -> str:
    run_id = f"prop-{next(_run_ids)}"
    store.create(RunRecord(run_id=run_id, run_file=RUN_FILE, created_at=NOW, updated_at=NOW))
    return run_id


def deliver(store: RunStore, run_id: str, batch: list[LogEvent]) -> JobProgress:
    log_batch = LogBatch(log_group="/trainrun/jobs", log_stream=f"{run_id}/train", log_events=batch)
    metrics = Metrics(namespace="TrainrunTest")
    apply_batch(log_batch, store=store, sfn=FakeSfn(), metrics=metrics, now=NOW)
    metrics.clear_metrics()  # as the handler's log_metrics decorator does after each invocation
    progress, _ = store.get_progress(run_id, "train")
    return progress if progress is not None else JobProgress()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=deliveries())
def test_any_order_and_duplication_never_lowers_the_step_nor_counts_a_line_twice(
    store: RunStore, plan: tuple[list[list[LogEvent]], list[int]]
) -> None:
    # Given one job log cut into batches, delivered in any order, some more than once
    batches, sequence = plan
    run_id = given_fresh_run(store)  # one fresh run per example: the moto table is shared
    all_events = [event for batch in batches for event in batch]
    delivered: dict[int, list[LogEvent]] = {}
    step: int | None = None

    for index in sequence:
        # When each batch is applied
        progress = deliver(store, run_id, batches[index])
        delivered[index] = batches[index]

        # Then the step is never lowered, and is the highest step delivered so far
        seen = [event for batch in delivered.values() for event in batch]
        if step is not None:
            assert progress.step is not None and progress.step >= step
        assert progress.step == max_step(seen)
        step = progress.step
        # and no line is counted twice
        assert progress.lines <= lines_of(seen)

    # Finally the step is the log's highest, and the history ends there
    progress = deliver(store, run_id, [])
    assert progress.step == max_step(all_events) == 44
    assert progress.history[-1].step == 44
    assert len({point.step for point in progress.history}) == len(progress.history)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=deliveries())
def test_batches_first_delivered_in_order_count_every_line_exactly_once(
    store: RunStore, plan: tuple[list[list[LogEvent]], list[int]]
) -> None:
    # Given the batches in order, each redelivered any number of times right after or later
    batches, sequence = plan
    first_seen = sorted(set(sequence), key=sequence.index)
    in_order = sorted(first_seen)
    replays = [index for index in sequence if index in in_order]
    run_id = given_fresh_run(store)

    # When they are delivered in order, then all replayed in any order
    for index in [*in_order, *replays]:
        progress = deliver(store, run_id, batches[index])

    # Then every line, checkpoint and failure is counted exactly once
    events: list[Any] = [event for batch in batches for event in batch]
    assert progress.lines == lines_of(events)
    assert progress.checkpoints == 3
    assert progress.step == 44
