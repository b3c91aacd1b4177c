"""Properties of the job log parser: progress is the maximum step and never moves back, whatever
the order and whatever garbage is mixed in; no input makes it raise."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
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
        "{'loss': ",
        "Epoch 0: 45%|####| 45/100 [00:10<00:12, 4.50it/s, loss=",
        "step 12 loss ",
        "global_step=1e999 loss=nan ",
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
    # Arbitrary text is sometimes a real progress line ("STEP:0;Loss=NAN" is one, in the plain
    # key/value format): garbage here is what is no progress on its own line.
    assume(not any(isinstance(parse_line(line), TrainEvent) for line in garbage))
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


# Lines in the other training formats (TRAIN_FORMATS): any numbers, any text around them.
NUMBERS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats().map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e999", "0x1f", "1_000", ".", "-", "e5", "1.2.3"]),
)
OTHER_FORMATS = st.sampled_from(
    [
        "{{'loss': {a}, 'grad_norm': {b}, 'learning_rate': {c}, 'epoch': {d}}}",
        "{{'loss': {a}, 'step': {b}}}",
        "Epoch {d}: 45%|####5 | {b}/{c} [00:10<00:12, {a}it/s, v_num=0, train_loss={a}]",
        "Epoch 0: : {b}it [00:04, {c}s/it, reduced_train_loss={a}, global_step={d}, throughput={c}]",
        "step {b} loss {a} lr {c} throughput {d}",
        "Step: {b}/{c} | Loss: {a} | grad_norm: {d}",
        "iter {b}: loss {a}, time {c}ms",
    ]
)


@PROPERTY_SETTINGS
@given(template=OTHER_FORMATS, a=NUMBERS, b=NUMBERS, c=NUMBERS, d=NUMBERS, prefix=PREFIXES, junk=GARBAGE)
def test_other_formats_with_any_numbers_never_raise_and_stay_json(
    template: str, a: str, b: str, c: str, d: str, prefix: str, junk: str
) -> None:
    line = prefix + template.format(a=a, b=b, c=c, d=d) + junk
    event = parse_line(line)
    if isinstance(event, TrainEvent):
        assert 0 <= event.step <= 2**62 and event.epoch >= 0
    s = JobLogSummary(step_limit=10**6)
    s.feed(line)
    json.dumps(s.to_json(), allow_nan=False)
    render_text(s)


@PROPERTY_SETTINGS
# (No CR or LF in the junk: a line is what a terminal shows after its last CR, which may not hold the tag.)
@given(
    template=OTHER_FORMATS,
    a=NUMBERS,
    b=NUMBERS,
    junk=st.text(st.characters(blacklist_characters="\r\n"), max_size=40),
    before=st.booleans(),
)
def test_no_format_reads_a_line_that_holds_the_end_markers_tag(
    template: str, a: str, b: str, junk: str, before: bool
) -> None:
    marker = "TRAINRUN-END run=r-1 job=train slurm_job_id=7 exit_code=0"
    progress = template.format(a=a, b=b, c=b, d=a)
    line = f"{marker} {junk}{progress}" if before else f"{progress}{junk} {marker}"
    assert not isinstance(parse_line(line), TrainEvent)
