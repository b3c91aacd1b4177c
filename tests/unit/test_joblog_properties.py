"""Properties of the job log parser: progress is the maximum step and never moves back, whatever
the order and whatever garbage is mixed in; no input makes it raise."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainrun.logic.job_log import (
    HISTORY_MAX_POINTS,
    CompileEvent,
    EndEvent,
    JobLogSummary,
    TrainEvent,
    parse_line,
    render_text,
    summarize_file,
)

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PREFIXES = st.sampled_from(["", "[0]:", "[0]: ", "0: ", "  3: ", "[default0]:", "node-1: "])
TIMES = st.sampled_from(["Thu Aug 24 16:35:59 2023", "Wed Dec 21 00:51:01 2022", "Mon Jan  1 00:00:00 2024"])
STEPS = st.integers(min_value=0, max_value=10**9)
LOSS = st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False)
LR = st.floats(min_value=1e-12, max_value=10, allow_nan=False, allow_infinity=False)
THROUGHPUT = st.floats(min_value=0, max_value=1e7, allow_nan=False, allow_infinity=False)
GRAD = st.none() | st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


def format_train(
    prefix: str, time: str, epoch: int, step: int, loss: float, lr: float, tp: float, grad: float | None
) -> str:
    """The f-string of the aws-neuron-samples training scripts."""
    gn = f"grad-norm : {grad}" if grad is not None else ""
    return (
        f"{prefix}LOG {time} - ({epoch}, {step}) step_loss : {loss:.4f} "
        f"learning_rate : {lr:.2e} throughput : {tp:.2f} {gn}"
    )


@st.composite
def train_lines(draw: st.DrawFn, epoch: int = 0) -> tuple[int, str]:
    step = draw(STEPS)
    line = format_train(draw(PREFIXES), draw(TIMES), epoch, step, draw(LOSS), draw(LR), draw(THROUGHPUT), draw(GRAD))
    return step, line + draw(st.sampled_from(["", "\n", "\r\n"]))


# Garbage: arbitrary text (including control characters, NULs, surrogates), binary decoded with
# replacement, and near-misses of the recognised formats.
NEAR_MISSES = st.sampled_from(
    [
        "LOG Thu Aug 24 16:35:59 2023 - (0, ",
        "step_loss : learning_rate : throughput :",
        "TRAINRUN-END run=",
        "||NEURON_PARALLEL_COMPILE||: Total graphs: ",
        "Traceback (most recent call last)",
        "srun: error",
        "ERROR  NRT:",
        "\x00",
        "\r",
    ]
)
GARBAGE = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=300).map(lambda b: b.decode("utf-8", errors="replace")),
    st.lists(st.one_of(NEAR_MISSES, st.text(max_size=20)), max_size=8).map("".join),
)


@PROPERTY_SETTINGS
@given(
    train=st.lists(train_lines(), max_size=60),
    garbage=st.lists(GARBAGE, max_size=60),
    seed=st.randoms(use_true_random=False),
)
def test_step_is_the_maximum_fed_and_never_decreases(
    train: list[tuple[int, str]], garbage: list[str], seed: object
) -> None:
    lines = [line for _, line in train] + garbage
    seed.shuffle(lines)  # type: ignore[attr-defined]
    s = JobLogSummary()
    last = -1
    for line in lines:
        s.feed(line)
        current = s.train.step if s.train is not None else -1
        assert current >= last
        last = current
    if train:
        assert s.train is not None
        assert s.train.step == max(step for step, _ in train)
    else:
        assert s.train is None
    assert s.lines == len(lines)
    assert 0 <= s.unparsed_lines <= len(garbage)
    history = [p[0] for p in s.history]
    assert history == sorted(set(history))
    json.dumps(s.to_json(), allow_nan=False)


@PROPERTY_SETTINGS
@given(st.lists(train_lines(), min_size=1, max_size=40, unique_by=lambda t: t[0]), st.randoms(use_true_random=False))
def test_final_progress_does_not_depend_on_order(train: list[tuple[int, str]], rnd: object) -> None:
    lines = [line for _, line in train]
    shuffled = list(lines)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a = JobLogSummary().feed_lines(lines)
    b = JobLogSummary().feed_lines(shuffled)
    assert a.train == b.train
    assert a.to_json()["train"] == b.to_json()["train"]


@PROPERTY_SETTINGS
@given(
    prefix=PREFIXES,
    time=TIMES,
    epoch=st.integers(min_value=0, max_value=10**6),
    step=STEPS,
    loss=LOSS,
    lr=LR,
    tp=THROUGHPUT,
    grad=GRAD,
)
def test_training_line_round_trip(
    prefix: str, time: str, epoch: int, step: int, loss: float, lr: float, tp: float, grad: float | None
) -> None:
    event = parse_line(format_train(prefix, time, epoch, step, loss, lr, tp, grad))
    assert event == TrainEvent(epoch, step, float(f"{loss:.4f}"), float(f"{lr:.2e}"), float(f"{tp:.2f}"), grad)


@PROPERTY_SETTINGS
@given(
    tag=st.sampled_from(["PARALLEL_COMPILE", "NEURON_PARALLEL_COMPILE"]),
    what=st.sampled_from(
        [("graphs", "graphs"), ("successful compilations", "succeeded"), ("failed compilations", "failed")]
    ),
    value=st.integers(min_value=0, max_value=10**12),
    pid=st.integers(min_value=1, max_value=4_194_304),
    prefix=PREFIXES,
)
def test_compile_line_round_trip(tag: str, what: tuple[str, str], value: int, pid: int, prefix: str) -> None:
    line = f"{prefix}2023-08-22 19:53:37.000212:  {pid}  INFO ||{tag}||: Total {what[0]}: {value}"
    assert parse_line(line) == CompileEvent(what[1], value, tag)  # type: ignore[arg-type]


RUN_IDS = st.from_regex(r"\A[a-z][a-z0-9-]{0,79}\Z")


@PROPERTY_SETTINGS
@given(
    run_id=RUN_IDS,
    job=st.sampled_from(["compile", "train"]),
    job_id=st.integers(min_value=0, max_value=10**15),
    exit_code=st.integers(min_value=-255, max_value=255),
)
def test_end_marker_round_trip(run_id: str, job: str, job_id: int, exit_code: int) -> None:
    line = f"TRAINRUN-END run={run_id} job={job} slurm_job_id={job_id} exit_code={exit_code}\n"
    assert parse_line(line) == EndEvent(run_id, job, job_id, exit_code)  # type: ignore[arg-type]
    s = JobLogSummary()
    s.feed(line)
    assert s.to_json()["end"] == {"job": job, "slurm_job_id": job_id, "exit_code": exit_code, "run_id": run_id}


@PROPERTY_SETTINGS
@given(line=GARBAGE)
def test_garbage_never_raises(line: str) -> None:
    parse_line(line)
    s = JobLogSummary()
    s.feed(line)
    s.feed(line)  # duplicates too
    assert s.lines == 2
    json.dumps(s.to_json(), allow_nan=False)
    render_text(s)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=2000), max_size=20))
def test_any_file_content_never_raises(chunks: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "slurm-1.out"
        path.write_bytes(b"\n".join(chunks))
        s = summarize_file(path)
    assert s.lines <= sum(c.count(b"\n") for c in chunks) + len(chunks) + 1
    json.dumps(s.to_json(), allow_nan=False)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=3 * HISTORY_MAX_POINTS))
def test_history_stays_bounded_sorted_and_ends_at_the_latest(steps: list[int]) -> None:
    s = JobLogSummary()
    for step in steps:
        s.feed(format_train("", "Thu Aug 24 16:35:59 2023", 0, step, 1.0, 1e-4, 100.0, None))
    history = [p[0] for p in s.history]
    assert len(history) <= HISTORY_MAX_POINTS + 1
    assert history == sorted(set(history))
    assert history[-1] == max(steps)
    assert history[0] == steps[0]
