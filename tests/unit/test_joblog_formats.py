"""Training progress from the log formats people print (samples and sources: tests/fixtures/joblogs/SOURCES.md)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from trainrun.logic.job_log import (
    MAX_PATTERN_CHARS,
    EndEvent,
    JobLogSummary,
    TrainEvent,
    compile_progress_pattern,
    parse_line,
)

JOBLOGS = Path(__file__).resolve().parents[1] / "fixtures" / "joblogs"


def summary_of(name: str, **kwargs: object) -> JobLogSummary:
    return JobLogSummary(**kwargs).feed_text((JOBLOGS / name).read_text())  # type: ignore[arg-type]


def test_hugging_face_trainer_dicts_give_loss_learning_rate_and_grad_norm() -> None:
    # Given Hugging Face Trainer's logging dicts, When they are parsed
    event = parse_line(
        "{'loss': 1.6462, 'grad_norm': 17.54932403564453, 'learning_rate': 4.166666666666667e-05, 'epoch': 0.5}"
    )
    # Then the values are read, and the step is marked as counted (the dict has none)
    assert isinstance(event, TrainEvent)
    assert (event.loss, event.learning_rate, event.grad_norm, event.counted) == (
        1.6462,
        4.166666666666667e-05,
        17.54932403564453,
        True,
    )


def test_hugging_face_trainer_steps_are_counted_logging_lines_and_eval_lines_are_not_progress() -> None:
    summary = summary_of("train_hf_trainer.out")
    assert summary.train is not None
    assert (summary.train.step, summary.train.loss, summary.train.epoch) == (5, 1.2141, 1)
    assert [point[0] for point in summary.history] == [1, 2, 3, 4, 5]
    assert summary.unparsed_lines == 1  # the eval_loss line


def test_hugging_face_trainer_dict_with_a_step_key_uses_it() -> None:
    event = parse_line("{'loss': 2.31, 'learning_rate': 3e-05, 'epoch': 0.5, 'step': 120}")
    assert isinstance(event, TrainEvent)
    assert (event.step, event.counted) == (120, False)


def test_a_redelivered_batch_counts_no_steps() -> None:
    # Given a summary told not to count (its lines were counted when first applied)
    summary = summary_of("train_hf_trainer.out", counted_from=None)
    # Then the counted lines are not progress
    assert summary.train is None


def test_counting_continues_from_earlier_batches() -> None:
    summary = summary_of("train_hf_trainer.out", counted_from=40)
    assert summary.train is not None and summary.train.step == 45
    assert summary.counted_steps == 45


def test_lightning_progress_bar_gives_the_global_step_loss_and_rate() -> None:
    summary = summary_of("train_lightning.out")
    assert summary.train is not None
    train = summary.train
    # The Colab bar (no |...|) at batch 1586 of epoch 0; its train_loss is preferred to the smoothed loss.
    assert (train.epoch, train.step, train.loss, train.throughput) == (0, 1586, 0.149, 2.06)
    assert summary.unparsed_lines == 1  # the first bar has no loss yet


def test_lightning_progress_bar_in_a_later_epoch_counts_the_earlier_epochs_batches() -> None:
    event = parse_line("Epoch 2:  22%|██▏       | 4/18 [00:17<01:02,  4.47s/it, loss=10.072, v_num=193315]")
    assert isinstance(event, TrainEvent)
    assert (event.epoch, event.step, event.loss) == (2, 2 * 18 + 4, 10.072)
    assert event.throughput == pytest.approx(1 / 4.47)  # s/it is turned into iterations per second


def test_neuronx_distributed_training_bar_gives_global_step_lr_throughput_and_gradient_norm() -> None:
    summary = summary_of("train_nxdt.out")
    train = summary.train
    assert train is not None
    # global_step=189.0 is the highest; the DPO line's global_step=1.000 is lower
    assert (train.step, train.loss) == (189, 7.56)
    event = parse_line((JOBLOGS / "train_nxdt.out").read_text().splitlines()[2])
    assert isinstance(event, TrainEvent)
    assert (event.step, event.loss, event.learning_rate, event.throughput, event.grad_norm) == (
        1,
        6.93,
        2.73e-5,
        0.108,
        8.6,
    )


@pytest.mark.parametrize(
    ("line", "step", "loss", "lr", "throughput"),
    [
        ("step 12 loss 2.31 lr 3e-4", 12, 2.31, 3e-4, None),
        ("iter 110: loss 3.9402, time 127.90ms, lr 6.00e-04", 110, 3.9402, 6e-4, None),
        ("Step: 120/1000 | Loss: 3.71 | LR: 3.0e-04 | throughput: 1520.5 | grad_norm: 1.02", 120, 3.71, 3e-4, 1520.5),
        ("step=130 loss=3.65 lr=3e-4 throughput=1533.0 epoch=0", 130, 3.65, 3e-4, 1533.0),
        ("EPOCH : 1 | step : 50 / 100 | step_loss : 0.1234 | elapse : 1 | remain : 2", 50, 0.1234, None, None),
        ("[0]: step 7 loss nan", 7, float("nan"), None, None),
    ],
)
def test_plain_key_value_lines_are_progress(
    line: str, step: int, loss: float, lr: float | None, throughput: float | None
) -> None:
    event = parse_line(line)
    assert isinstance(event, TrainEvent)
    assert event.step == step
    assert event.loss == pytest.approx(loss, nan_ok=True)
    assert (event.learning_rate, event.throughput) == (lr, throughput)


def test_the_issue_script_is_read_whole() -> None:
    summary = summary_of("train_key_value.out")
    assert summary.unparsed_lines == 0
    assert summary.train is not None and summary.train.step == 130


@pytest.mark.parametrize(
    "line",
    [
        "loss of connection to node 3, step back",  # words, no numbers
        "Loss: 2.31",  # a loss alone: no step, not a plain progress line
        "step 5 of the setup: done",  # a step alone
        "model.embed.step_size=3 loss_scale=65536",  # other names that contain the words
        "STEP:0:Loss=NAN",  # values glued to the next word by a colon: a tag, not pairs
        "global_step=1e999 loss=nan",  # a step that is no step number
        "{'eval_loss': 0.62, 'epoch': 1.0}",
        "Validation DataLoader 0:  50%|█████     | 5/10 [00:01<00:01,  4.5it/s]",
    ],
)
def test_lines_that_only_mention_progress_words_are_not_progress(line: str) -> None:
    assert not isinstance(parse_line(line), TrainEvent)


@pytest.mark.parametrize(
    "suffix",
    [" step 5 loss 2.0", " {'loss': 1.0, 'step': 3}", " Epoch 0: 1/2 [00:01, 1.0it/s, loss=1.0]"],
)
def test_no_format_turns_an_end_marker_line_into_progress_or_hides_it(suffix: str) -> None:
    marker = "TRAINRUN-END run=r-20240101-000000-abcd job=train slurm_job_id=7 exit_code=0"
    assert not isinstance(parse_line(marker + suffix), TrainEvent)
    assert not isinstance(parse_line(suffix.strip() + " " + marker), TrainEvent)
    pattern = compile_progress_pattern(r"(?P<step>\d+)")
    assert isinstance(parse_line(marker, pattern), EndEvent)  # a pattern matching anything cannot take it


def test_a_custom_pattern_reads_a_format_no_built_in_one_does() -> None:
    pattern = compile_progress_pattern(r"it=(?P<step>\d+) obj=(?P<loss>\S+) tok/s=(?P<throughput>\S+)")
    summary = JobLogSummary(pattern=pattern).feed_lines(["it=3 obj=4.5 tok/s=1200", "it=4 obj=4.25 tok/s=1210"])
    assert summary.train is not None
    assert (summary.train.step, summary.train.loss, summary.train.throughput) == (4, 4.25, 1210.0)
    assert parse_line("it=3 obj=4.5 tok/s=1200") is None  # without the pattern it is not read


def test_a_custom_pattern_without_step_counts_its_lines() -> None:
    pattern = compile_progress_pattern(r"objective (?P<loss>[\d.]+)")
    summary = JobLogSummary(pattern=pattern).feed_lines(["objective 3.0", "objective 2.0"])
    assert summary.train is not None and (summary.train.step, summary.train.loss) == (2, 2.0)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("step (?P<step>\\d+", "not a Python regular expression"),
        ("(?P<stp>\\d+) (?P<loss>\\S+)", "stp"),
        ("(?P<lr>\\S+)", "the named groups it may have are step, epoch"),
        ("step \\d+ loss \\S+", "no (?P<step>...) or (?P<loss>...) group"),
        ("(?P<step>\\d+)" + "x" * MAX_PATTERN_CHARS, f"keep it under {MAX_PATTERN_CHARS}"),
        ("(?P<step>(\\d+)+)", "repeats a repeated group"),
    ],
)
def test_an_unusable_custom_pattern_is_refused_with_the_fix(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        compile_progress_pattern(text)


@pytest.mark.parametrize(
    "line",
    [
        "Epoch 0: " * 1000,
        "Epoch 1: 45%|" + "#" * 4000,
        "Epoch 0: 1/2 [" + "1 " * 1500 + "loss=1",
        "{'loss': " * 600,
        "{'loss': 1, " + "'a': 1, " * 600,
        "step 1 " * 700 + "loss",
        "loss=" + "1." * 2000,
        "step" * 1000 + " loss 1",
    ],
)
def test_hostile_lines_in_the_shape_of_a_format_parse_in_linear_time(line: str) -> None:
    # Given a line of MAX_LINE_CHARS built to make a backtracking pattern slow
    started = time.perf_counter()
    for _ in range(10):
        parse_line(line)
    # Then it costs about what a normal line does (generous for a loaded machine)
    assert (time.perf_counter() - started) / 10 < 0.05
