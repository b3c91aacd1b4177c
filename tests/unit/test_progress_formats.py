"""The progress function with the log formats beyond the Neuron samples': counted steps, a run's
own pattern, and the one-time notice when a train job prints no progress at all."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Metrics

from trainrun.logic.job_log import TRAIN_FORMATS
from trainrun.model.run_file import RunSpec
from trainrun.model.run_record import RunRecord, RunStore
from trainrun.steps.progress import NO_PROGRESS_LINES, apply_batch
from trainrun.steps.run_events import RunState

from .test_progress import NOW, RUN_ID, FakeSfn, given_run, log_batch, progress_of

HF_LINE = "{{'loss': {loss}, 'grad_norm': 1.5, 'learning_rate': 3e-05, 'epoch': 0.5}}"


class RecordingEvents:
    """Stands in for trainrun.steps.run_events.RunEvents: what was published."""

    def __init__(self) -> None:
        self.published: list[tuple[str, RunState, str]] = []

    def publish(self, record: RunRecord, state: RunState, detail: str = "") -> None:
        self.published.append((record.run_id, state, detail))


def apply(batch: Any, store: RunStore, events: RecordingEvents | None = None) -> None:
    metrics = Metrics(namespace="TrainrunTest")
    apply_batch(batch, store=store, sfn=FakeSfn(), metrics=metrics, now=NOW, run_events=events)  # type: ignore[arg-type]
    metrics.clear_metrics()


def with_spec(store: RunStore, **workload: Any) -> None:
    store.set_spec(
        RUN_ID,
        RunSpec.model_validate(
            {
                "name": "bert",
                "capacity": {"reservation_id": "cr-0123456789abcdef0", "instance_type": "trn1.32xlarge", "nodes": 1},
                "workload": {"source": {"s3": "s3://bucket/workload.tar.gz"}, "train": "t", **workload},
            }
        ),
    )


def test_plain_key_value_lines_give_the_step_loss_and_history(store: RunStore) -> None:
    # Given a train job that prints `step N loss X lr Y` (the script)
    given_run(store, token=None)
    apply(log_batch([f"step {step} loss {3 - step / 10} lr 3e-4" for step in (1, 2, 3)]), store)
    # Then the run record has its step, loss and a history to plot
    progress = progress_of(store)
    assert (progress.step, progress.loss, progress.learning_rate) == (3, 2.7, 3e-4)
    assert [point.step for point in progress.history] == [1, 2, 3]
    assert progress.unparsed_lines == 0


def test_trainer_dicts_are_counted_across_batches_and_a_redelivery_counts_nothing(store: RunStore) -> None:
    # Given Hugging Face Trainer dicts (no step) in two batches
    given_run(store, token=None)
    first = log_batch([HF_LINE.format(loss=2.0), HF_LINE.format(loss=1.9)])
    apply(first, store)
    apply(log_batch([HF_LINE.format(loss=1.8)], first=3), store)
    # When the first batch is delivered again
    apply(first, store)
    # Then the step is the number of logging lines, counted once each
    progress = progress_of(store)
    assert (progress.step, progress.loss, progress.counted_steps) == (3, 1.8, 3)
    assert [point.step for point in progress.history] == [1, 2, 3]


def test_the_runs_progress_pattern_reads_its_own_format(store: RunStore) -> None:
    given_run(store, token=None)
    with_spec(store, progress_pattern=r"it=(?P<step>\d+) obj=(?P<loss>\S+) tok/s=(?P<throughput>\S+)")
    apply(log_batch(["it=7 obj=4.5 tok/s=1200"]), store)
    progress = progress_of(store)
    assert (progress.step, progress.loss, progress.throughput) == (7, 4.5, 1200.0)


def test_a_train_job_printing_no_progress_is_noticed_once_with_the_formats_read(store: RunStore) -> None:
    # Given a train job that prints lines no format reads
    given_run(store, token=None)
    events = RecordingEvents()
    noise = [f"epoch done, objective={n}" for n in range(NO_PROGRESS_LINES - 1)]
    apply(log_batch(noise), store, events)
    assert progress_of(store).no_progress_notice is None and events.published == []  # not yet
    # When it has printed NO_PROGRESS_LINES of them, and then more
    apply(log_batch(["more noise"], first=NO_PROGRESS_LINES), store, events)
    apply(log_batch(["still noise"], first=NO_PROGRESS_LINES + 1), store, events)
    # Then the run says so once: in the record, and as one run event naming the formats and the fix
    notice = progress_of(store).no_progress_notice
    assert notice is not None and "workload.progress_pattern" in notice
    assert all(fmt in notice for fmt in TRAIN_FORMATS.values())
    assert events.published == [(RUN_ID, RunState.NO_PROGRESS, notice)]


def test_a_compile_job_printing_no_progress_is_not_noticed(store: RunStore) -> None:
    given_run(store, token=None, job="compile")
    events = RecordingEvents()
    apply(log_batch(["compiling"] * NO_PROGRESS_LINES, stream=f"{RUN_ID}/compile"), store, events)
    assert progress_of(store, "compile").no_progress_notice is None and events.published == []


def test_no_notice_once_the_job_shows_progress(store: RunStore) -> None:
    given_run(store, token=None)
    apply(log_batch(["step 1 loss 2.0", *(["noise"] * NO_PROGRESS_LINES)]), store, RecordingEvents())
    assert progress_of(store).no_progress_notice is None
