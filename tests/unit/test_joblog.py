"""The job log parser: real-format lines, end markers, failure signatures, hostile input."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from trainrun.logic import job_log
from trainrun.logic.job_log import (
    FAILURE_SIGNATURES,
    HISTORY_MAX_POINTS,
    MAX_LINE_CHARS,
    TAIL_LINES,
    CheckpointEvent,
    CompileEvent,
    EndEvent,
    FailureEvent,
    JobLogSummary,
    TrainEvent,
    parse_line,
    render_text,
    summarize_file,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "joblogs"

# Verbatim from the Neuron documentation and its BERT-large and Llama training tutorials.
SEED_COMPILE = [
    "2022-12-21 00:07:10.000925: INFO ||PARALLEL_COMPILE||: Total graphs: 6",
    "2022-12-21 00:07:10.000925: INFO ||PARALLEL_COMPILE||: Total successful compilations: 6",
    "2022-12-21 00:07:10.000925: INFO ||PARALLEL_COMPILE||: Total failed compilations: 0",
]
SEED_TRAIN = [
    "[0]:LOG Wed Dec 21 00:51:01 2022 - (0, 14) step_loss : 10.7011 learning_rate : 2.80e-06 throughput : 6449.36",
    "[0]:LOG Wed Dec 21 00:51:06 2022 - (0, 15) step_loss : 10.6613 learning_rate : 3.00e-06 throughput : 6453.70",
    "[0]:LOG Wed Dec 21 00:51:11 2022 - (0, 16) step_loss : 10.5861 learning_rate : 3.20e-06 throughput : 6458.87",
]
BERT_LINE = "LOG Thu Aug 24 16:35:59 2023 - (0, 122) step_loss : 9.8438 learning_rate : 1.22e-04 throughput : 1642.51 "


def train_line(step: int, *, epoch: int = 0, loss: float = 9.5, prefix: str = "", grad: float | None = None) -> str:
    gn = f"grad-norm : {grad}" if grad is not None else ""
    return (
        f"{prefix}LOG Thu Aug 24 16:35:59 2023 - ({epoch}, {step}) step_loss : {loss:.4f} "
        f"learning_rate : {1e-4:.2e} throughput : {1642.51:.2f} {gn}"
    )


# --------------------------------------------------------------------------------------------
# Compile summaries
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "field", "value", "tag"),
    [
        (SEED_COMPILE[0], "graphs", 6, "PARALLEL_COMPILE"),
        (SEED_COMPILE[1], "succeeded", 6, "PARALLEL_COMPILE"),
        (SEED_COMPILE[2], "failed", 0, "PARALLEL_COMPILE"),
        (
            "2023-08-22 19:53:37.000212:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Total graphs: 42",
            "graphs",
            42,
            "NEURON_PARALLEL_COMPILE",
        ),
        (
            "2023-08-22 19:53:37.000212:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Total successful compilations: 40",
            "succeeded",
            40,
            "NEURON_PARALLEL_COMPILE",
        ),
        (
            "2023-08-22 19:53:37.000212:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Total failed compilations: 2\n",
            "failed",
            2,
            "NEURON_PARALLEL_COMPILE",
        ),
        # prefixes: Neuron docs show "   INFO: " wrapping, Ray shows an ANSI worker label, srun --label "3: "
        (
            "   INFO: 2023-08-24 20:21:11.000895:  161136  INFO ||NEURON_PARALLEL_COMPILE||: Total graphs: 2",
            "graphs",
            2,
            "NEURON_PARALLEL_COMPILE",
        ),
        (
            "\x1b[36m(RayTrainWorker pid=123, ip=10.0.0.1)\x1b[0m 2024-01-01 00:00:00.000001:  77  INFO "
            "||NEURON_PARALLEL_COMPILE||: Total successful compilations: 3",
            "succeeded",
            3,
            "NEURON_PARALLEL_COMPILE",
        ),
        (
            "3: 2022-12-21 00:07:10.000925: INFO ||PARALLEL_COMPILE||: Total failed compilations: 1",
            "failed",
            1,
            "PARALLEL_COMPILE",
        ),
    ],
)
def test_compile_summary_lines(line: str, field: str, value: int, tag: str) -> None:
    assert parse_line(line) == CompileEvent(field, value, tag)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "line",
    [
        "2023-08-22 19:50:01.000111:  12345  INFO ||NEURON_PARALLEL_COMPILE||: worker 0 finished with num of tasks 1",
        "2023-08-22 19:50:01.000111:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Running trial run",
        "2023-08-22 19:50:01.000111:  12345  INFO ||NEURON_CACHE||: Total graphs: 4",  # not the compile tag
        "INFO ||NEURON_PARALLEL_COMPILE||: Total graphs: many",
    ],
)
def test_other_compile_lines_are_not_summaries(line: str) -> None:
    assert parse_line(line) is None


def test_compile_summary_accumulates_and_keeps_the_worst_of_several_workers() -> None:
    s = JobLogSummary().feed_lines(SEED_COMPILE)
    assert s.to_json()["compile"] == {"graphs": 6, "succeeded": 6, "failed": 0}
    # a second node reports a failure, then a third reports a clean run: the failure stays visible
    s.feed("2022-12-21 00:07:11.000001: INFO ||PARALLEL_COMPILE||: Total failed compilations: 1")
    s.feed("2022-12-21 00:07:12.000001: INFO ||PARALLEL_COMPILE||: Total failed compilations: 0")
    assert s.to_json()["compile"] == {"graphs": 6, "succeeded": 6, "failed": 1}


def test_partial_compile_summary_has_nulls() -> None:
    s = JobLogSummary()
    s.feed(SEED_COMPILE[0])
    assert s.to_json()["compile"] == {"graphs": 6, "succeeded": None, "failed": None}
    assert "? succeeded" in render_text(s)


# --------------------------------------------------------------------------------------------
# Training lines
# --------------------------------------------------------------------------------------------


def test_seed_training_lines() -> None:
    events = [parse_line(line) for line in SEED_TRAIN]
    assert events == [
        TrainEvent(0, 14, 10.7011, 2.80e-06, 6449.36),
        TrainEvent(0, 15, 10.6613, 3.00e-06, 6453.70),
        TrainEvent(0, 16, 10.5861, 3.20e-06, 6458.87),
    ]


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "[0]:",
        "[0]: ",
        "0: ",
        "  0: ",
        "12: ",
        "[default0]:",
        "[1,0]<stdout>:",
        "\x1b[36m(RayTrainWorker pid=1)\x1b[0m ",
    ],
)
def test_training_line_with_any_rank_prefix(prefix: str) -> None:
    event = parse_line(prefix + BERT_LINE)
    assert event == TrainEvent(0, 122, 9.8438, 1.22e-04, 1642.51, None)
    assert event is not None and event.kind == "train"


@pytest.mark.parametrize(
    ("suffix", "grad_norm"),
    [
        ("grad-norm : 1.2345", 1.2345),
        ("grad-norm : 0.8", 0.8),
        ("param_norm : 1234.5 grad-norm : 2.5", 2.5),
        ("grad-norm : tensor(1.5, device='xla:0')", 1.5),
        ("grad-norm : not-a-number", None),
        ("", None),
    ],
)
def test_optional_grad_norm(suffix: str, grad_norm: float | None) -> None:
    event = parse_line(BERT_LINE + suffix + "\n")
    assert isinstance(event, TrainEvent)
    assert event.step == 122
    assert event.grad_norm == grad_norm


def test_nan_and_inf_values_parse_and_become_null_in_json() -> None:
    line = "LOG Thu Aug 24 16:35:59 2023 - (1, 7) step_loss : nan learning_rate : 1.00e-04 throughput : inf"
    event = parse_line(line)
    assert isinstance(event, TrainEvent)
    assert math.isnan(event.loss) and math.isinf(event.throughput)
    s = JobLogSummary()
    s.feed(line)
    out = s.to_json()
    assert out["train"] == {
        "epoch": 1,
        "step": 7,
        "loss": None,
        "learning_rate": 1e-4,
        "throughput": None,
        "grad_norm": None,
    }
    json.dumps(out, allow_nan=False)  # strict JSON
    assert "loss nan" in render_text(s)


@pytest.mark.parametrize(
    "line",
    [
        "LOG Thu Aug 24 16:35:59 2023 - (0, 122) step_loss : 9.8438 learning_rate : 1.22e-04",  # truncated
        "LOG Thu Aug 24 16:35:59 2023 - (0, 122) step_loss : 9.8438 learning_rate : 1.22e-04 throughput : ",
        "LOG Thu Aug 24 16:35:59 2023 - (0, 122) step_loss : 9.84,38 learning_rate : 1.22e-04 throughput : 1.0",
        "LOG Thu Aug 24 16:35:59 2023 - (0, -1) step_loss : 9.8 learning_rate : 1.22e-04 throughput : 1.0",
        "LOG Thu Aug 24 16:35:59 2023 - (0, 1" + "0" * 40 + ") step_loss : 9 learning_rate : 1 throughput : 1",
        "LOG Thu Aug 24 16:35:59 2023 - (0, 1)",
    ],
)
def test_malformed_training_lines_are_not_progress(line: str) -> None:
    assert parse_line(line) is None
    s = JobLogSummary()
    s.feed(line)
    assert s.train is None and s.unparsed_lines == 1


def test_train_keeps_highest_step_and_ignores_duplicates_and_out_of_order() -> None:
    s = JobLogSummary()
    for step in (1, 2, 5, 3, 5, 4, 2):
        s.feed(train_line(step, loss=10 - step / 10))
    assert s.train is not None and s.train.step == 5
    assert s.train.loss == pytest.approx(9.5)
    assert [p[0] for p in s.history] == [1, 2, 5]  # history follows progress only


def test_higher_epoch_wins_even_if_its_step_counter_restarted() -> None:
    s = JobLogSummary().feed_lines([train_line(90, epoch=0), train_line(3, epoch=1), train_line(80, epoch=0)])
    assert s.train is not None and (s.train.epoch, s.train.step) == (1, 3)


# --------------------------------------------------------------------------------------------
# Checkpoints and end markers
# --------------------------------------------------------------------------------------------


def test_checkpoints_are_counted() -> None:
    lines = ["Checkpointing...", "Checkpointing done...", "0: Checkpointing done...", "Checkpointing..."]
    assert isinstance(parse_line(lines[1]), CheckpointEvent)
    assert parse_line(lines[0]) is None
    s = JobLogSummary().feed_lines(lines)
    assert s.checkpoints == 2
    assert s.unparsed_lines == 2


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("TRAINRUN-END run=my-run job=train slurm_job_id=1234 exit_code=0", EndEvent("my-run", "train", 1234, 0)),
        ("TRAINRUN-END run=r job=compile slurm_job_id=7 exit_code=137\n", EndEvent("r", "compile", 7, 137)),
        (
            "TRAINRUN-END run=bert-large-p1 job=train slurm_job_id=19 exit_code=-1\r\n",
            EndEvent("bert-large-p1", "train", 19, -1),
        ),
        ("  TRAINRUN-END run=a1 job=train slurm_job_id=2 exit_code=1  ", EndEvent("a1", "train", 2, 1)),
        ("TRAINRUN-END run=" + "a" * 80 + " job=train slurm_job_id=2 exit_code=1", EndEvent("a" * 80, "train", 2, 1)),
    ],
)
def test_end_marker(line: str, expected: EndEvent) -> None:
    assert parse_line(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "TRAINRUN-END run=My-Run job=train slurm_job_id=1 exit_code=0",  # upper case run id
        "TRAINRUN-END run=1run job=train slurm_job_id=1 exit_code=0",  # starts with a digit
        "TRAINRUN-END run=" + "a" * 81 + " job=train slurm_job_id=1 exit_code=0",  # too long
        "TRAINRUN-END run=r job=eval slurm_job_id=1 exit_code=0",  # unknown job kind
        "TRAINRUN-END run=r job=train slurm_job_id=x exit_code=0",
        "TRAINRUN-END run=r job=train slurm_job_id=1 exit_code=",
        "TRAINRUN-END run=r job=train slurm_job_id=1",  # truncated
        "TRAINRUN-END run=r job=train slurm_job_id=1 exit_code=0 extra=1",
        "TRAINRUN-END  run=r job=train slurm_job_id=1 exit_code=0",
        "0: TRAINRUN-END run=r job=train slurm_job_id=1 exit_code=0",  # printed by a task, not the wrapper
        "echo TRAINRUN-END run=r job=train slurm_job_id=1 exit_code=0",
        "TRAINRUN-END run=r job=train slurm_job_id=" + "9" * 5000 + " exit_code=0",
    ],
)
def test_not_an_end_marker(line: str) -> None:
    assert not isinstance(parse_line(line), EndEvent)


def test_last_end_marker_wins() -> None:
    s = JobLogSummary().feed_lines(
        [
            "TRAINRUN-END run=r job=compile slurm_job_id=1 exit_code=0",
            "TRAINRUN-END run=r job=train slurm_job_id=2 exit_code=3",
        ]
    )
    assert s.to_json()["end"] == {"job": "train", "slurm_job_id": 2, "exit_code": 3, "run_id": "r"}
    assert s.failed


# --------------------------------------------------------------------------------------------
# Failure signatures
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "signatures"),
    [
        ("Traceback (most recent call last):", ("traceback",)),
        ("0: Traceback (most recent call last):", ("traceback",)),
        ("[3]:Traceback (most recent call last):", ("traceback",)),
        ("[default0]:Traceback (most recent call last):", ("traceback",)),
        ("[1,0]<stderr>:Traceback (most recent call last):", ("traceback",)),
        ("srun: error: queue1-st-trn1-2: task 1: Exited with exit code 1", ("srun_error",)),
        ("srun: error: Unable to create step for job 12: Job/step already completing or completed", ("srun_error",)),
        ("slurmstepd: error: *** STEP 19.0 ON queue1-st-trn1-1 CANCELLED AT 2023-08-24T16:36:20 ***", ("srun_error",)),
        ("srun: error: queue1-st-trn1-1: task 0: Out Of Memory", ("out_of_memory", "srun_error")),
        (
            "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=12.0. Some of your processes may have been "
            "killed by the cgroup out-of-memory handler.",
            ("out_of_memory", "srun_error"),
        ),
        (
            "2023-Aug-24 16:35:59.0123 12345:12345 ERROR  NRT:nrt_init      Failed to initialize the runtime",
            ("neuron_runtime_error",),
        ),
        (
            "1: 2023-Jun-27 20:54:19.0925 3946:3946 ERROR  TDRV:tdrv_get_dev_info   No neuron device available",
            ("neuron_runtime_error",),
        ),
        (
            "2023-Aug-24 16:36:12.0457 98211:98342 ERROR   ENC:enc_init_comm   failed to init ring",
            ("neuron_runtime_error",),
        ),
        ("RuntimeError: nrt_execute failed with status 4", ("neuron_runtime_error",)),
        ("nrt_load status=NRT_LOAD_NOT_ENOUGH_NC", ("neuron_runtime_error",)),
        ("Execution failed: NRT_EXEC_COMPLETED_WITH_ERR", ("neuron_runtime_error",)),
        (
            "2024-Mar-05 10:01:02.0003 4242:4242 ERROR  NRT:nrt_execute  status=NRT_EXEC_COMPLETED_WITH_NUM_ERR",
            ("neuron_runtime_error", "neuron_workload_error"),
        ),
        (
            "nrt_load_collectives failed: NRT_UNSUPPORTED_NEFF_VERSION",
            ("neuron_runtime_error", "neuron_workload_error"),
        ),
        ("NRT_INVALID_HANDLE passed to nrt_execute", ("neuron_runtime_error",)),
        ("RuntimeError: Failed to initialize Neuron Runtime", ("neuron_runtime_error",)),
        ("NEURON_RT_EXEC_TIMEOUT exceeded: execution failed", ("neuron_runtime_error",)),
        ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", ("out_of_memory",)),
        ("OSError: [Errno 12] Cannot allocate memory", ("out_of_memory",)),
        ("MemoryError", ("out_of_memory",)),
        ("  MemoryError: Unable to allocate 4.00 GiB", ("out_of_memory",)),
        ("kernel: Out of memory: Killed process 4242 (python3)", ("out_of_memory",)),
        ("OOM when allocating tensor with shape[1024,1024]", ("out_of_memory",)),
        ("terminate called after throwing an instance of 'std::bad_alloc'", ("out_of_memory",)),
        (
            "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Out of memory allocating 67108864 bytes",
            ("out_of_memory",),
        ),
        (
            "2023-Aug-24 16:36:12.0457 98211:98342 ERROR  NRT:nrt_allocate_tensor   Failed: NRT_RESOURCE out of memory",
            ("out_of_memory", "neuron_runtime_error"),
        ),
    ],
)
def test_failure_signatures(line: str, signatures: tuple[str, ...]) -> None:
    event = parse_line(line)
    assert isinstance(event, FailureEvent)
    assert event.signatures == signatures
    assert event.signature == signatures[0]
    assert event.text == line.strip()
    assert set(event.signatures) <= set(FAILURE_SIGNATURES)


@pytest.mark.parametrize(
    "line",
    [
        "2023-Aug-24 16:30:13.0789 161136:161300 INFO  NRT:nrt_init  Neuron Runtime version 2.15.11.0",
        "2023-Aug-24 16:30:13.0789 161136:161300 WARN  NRT:nrt_tensor_allocate  slow allocation",
        "NEURON_RT_LOG_LEVEL=ERROR",
        "export NEURON_RT_VISIBLE_CORES=0-31",
        "The traceback module prints a Traceback (most recent call last): like this",  # not at a line start
        "Collecting memory-profiler==0.61.0",
        "INFO: zoom and bloom rooms",
        "Requirement already satisfied: torch-neuronx in ./venv/lib/python3.8/site-packages",
        "srun: Job 12 step creation temporarily disabled, retrying",
        "2023-08-24 16:30:14.000456:  1  INFO ||NEURON_CC_WRAPPER||: Compile cache path: /var/tmp/neuron-compile-cache",
        "memory usage: 12.3 GiB",
    ],
)
def test_lookalikes_are_not_failures(line: str) -> None:
    assert parse_line(line) is None


def test_failures_are_unique_in_order_with_first_line_and_exception() -> None:
    s = JobLogSummary().feed_lines(
        [
            train_line(1),
            "1: Traceback (most recent call last):",
            '1:   File "train.py", line 10, in <module>',
            "1:     main()",
            "1: ValueError: bad shape (3, 4)",
            "srun: error: node-1: task 1: Exited with exit code 1",
            "Traceback (most recent call last):",
            "srun: error: node-2: task 2: Exited with exit code 1",
        ]
    )
    assert s.failures == ["traceback", "srun_error"]
    assert s.first_failure == "1: Traceback (most recent call last):"
    assert s.exception == "ValueError: bad shape (3, 4)"
    assert s.failed
    text = render_text(s)
    assert "failures: traceback, srun_error" in text and "ValueError: bad shape" in text and "FAILED" in text


def test_exception_line_that_is_itself_a_failure() -> None:
    s = JobLogSummary().feed_lines(
        ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "MemoryError"]
    )
    assert s.failures == ["traceback", "out_of_memory"]
    assert s.exception == "MemoryError"


# --------------------------------------------------------------------------------------------
# Summary, JSON, history, tail
# --------------------------------------------------------------------------------------------


def test_to_json_has_the_documented_keys() -> None:
    out = JobLogSummary().to_json()
    documented = {"compile", "train", "checkpoints", "end", "failures", "lines", "unparsed_lines"}
    assert documented <= out.keys()
    assert out["compile"] is None and out["train"] is None and out["end"] is None
    assert out["checkpoints"] == 0 and out["failures"] == [] and out["lines"] == 0 and out["unparsed_lines"] == 0

    s = JobLogSummary().feed_lines(
        [*SEED_COMPILE, *SEED_TRAIN, "Checkpointing done...", "TRAINRUN-END run=r job=train slurm_job_id=5 exit_code=0"]
    )
    out = s.to_json()
    assert documented <= out.keys()
    assert {"graphs", "succeeded", "failed"} <= out["compile"].keys()
    assert {"epoch", "step", "loss", "learning_rate", "throughput"} <= out["train"].keys()
    assert {"job", "slurm_job_id", "exit_code"} <= out["end"].keys()
    assert out["train"]["step"] == 16 and out["checkpoints"] == 1 and out["lines"] == 8
    assert json.loads(json.dumps(out, allow_nan=False)) == out


def test_lines_and_unparsed_lines() -> None:
    s = JobLogSummary().feed_lines(["", "\n", "   \t\n", "\r\n", "hello", "Begin epoch 0\n", SEED_TRAIN[0]])
    assert s.lines == 7
    assert s.unparsed_lines == 2


def test_history_is_bounded_and_spans_the_run() -> None:
    s = JobLogSummary()
    total = 10 * HISTORY_MAX_POINTS + 7
    for step in range(1, total + 1):
        s.feed(train_line(step, loss=1000.0 / step))
        assert len(s.history) <= HISTORY_MAX_POINTS + 1
    steps = [p[0] for p in s.history]
    assert len(steps) >= HISTORY_MAX_POINTS // 2
    assert steps[0] == 1 and steps[-1] == total
    assert steps == sorted(set(steps))
    gaps = {b - a for a, b in itertools.pairwise(steps[:-1])}
    assert len(gaps) == 1  # evenly thinned (the last point is always the latest)


def test_history_thinning_is_deterministic() -> None:
    lines = [train_line(step) for step in range(1, 3000)]
    assert JobLogSummary().feed_lines(lines).history == JobLogSummary().feed_lines(lines).history


def test_tail_keeps_the_last_lines() -> None:
    s = JobLogSummary().feed_lines(f"line {i}\n" for i in range(TAIL_LINES + 30))
    assert s.tail == [f"line {i}" for i in range(30, TAIL_LINES + 30)]


# --------------------------------------------------------------------------------------------
# Hostile input
# --------------------------------------------------------------------------------------------


def test_huge_line_is_capped() -> None:
    huge = BERT_LINE + "x" * (1 << 20)
    assert isinstance(parse_line(huge), TrainEvent)  # the interesting part is at the start
    hidden = "x" * (1 << 20) + BERT_LINE  # beyond the cap: ignored, not scanned
    assert parse_line(hidden) is None
    s = JobLogSummary()
    s.feed(hidden)
    s.feed("Traceback (most recent call last):" + "y" * (1 << 20))
    assert all(len(line) <= MAX_LINE_CHARS for line in s.tail)
    assert s.first_failure is not None and len(s.first_failure) <= MAX_LINE_CHARS


@pytest.mark.parametrize(
    "line",
    [
        "\x00" * 100,
        "LOG \x00 - (0, 1) step_loss : \x00 learning_rate : 1 throughput : 1",
        "\x00Traceback (most recent call last):",
        "\ufffd\ufffd\ufffdPK\x03\x04\x14\x00\x06\x00",
        "\udcff\udcfe surrogate escapes",
        "(" * 5000 + "step_loss" + ")" * 5000,
        "LOG " + " - (" * 3000 + "step_loss : " * 500,
        "TRAINRUN-END " * 1000,
        "||PARALLEL_COMPILE||: Total graphs: " + "9" * 5000,
        "grad-norm : " * 1000 + "step_loss",
        "\r\r\r",
        "\x1b[2K\x1b[1G" * 100,
    ],
)
def test_hostile_lines_never_raise(line: str) -> None:
    parse_line(line)
    s = JobLogSummary()
    s.feed(line)
    json.dumps(s.to_json())
    render_text(s)


def test_nul_bytes_are_not_kept_in_text_output() -> None:
    s = JobLogSummary().feed_lines(["Traceback (most recent call last):\x00\x00", "a\x00b"])
    assert "\x00" not in (s.first_failure or "")
    assert all("\x00" not in line for line in s.tail)


def test_carriage_return_progress_bar_keeps_what_is_on_screen() -> None:
    line = " 10%|#    | 1/10\r 20%|##   | 2/10\r" + SEED_TRAIN[0] + "\r\n"
    s = JobLogSummary()
    assert isinstance(s.feed(line), TrainEvent)
    assert s.tail == [SEED_TRAIN[0]]


# --------------------------------------------------------------------------------------------
# Files (fixtures in the real formats)
# --------------------------------------------------------------------------------------------


def test_compile_job_fixture() -> None:
    s = summarize_file(FIXTURES / "compile_bert_ok.out")
    out = s.to_json()
    assert out["compile"] == {"graphs": 2, "succeeded": 2, "failed": 0}
    assert out["end"] == {"job": "compile", "slurm_job_id": 17, "exit_code": 0, "run_id": "bert-large-p1"}
    assert out["failures"] == []
    # the compile job's trial run prints training lines too (their values are meaningless)
    assert out["train"]["step"] == 2
    assert not s.failed
    assert "compile: 2 graphs, 2 succeeded, 0 failed" in render_text(s)


def test_train_job_fixture() -> None:
    s = summarize_file(str(FIXTURES / "train_bert_ok.out"))
    out = s.to_json()
    assert out["compile"] is None
    assert out["train"]["epoch"] == 0 and out["train"]["step"] == 40
    assert out["train"]["loss"] == pytest.approx(9.5999)
    assert out["train"]["grad_norm"] == pytest.approx(1.623)
    assert out["checkpoints"] == 2
    assert out["end"] == {"job": "train", "slurm_job_id": 18, "exit_code": 0, "run_id": "bert-large-p1"}
    assert out["failures"] == []
    assert [p[0] for p in s.history] == list(range(1, 41))
    text = render_text(s)
    assert "step 40" in text and "status: OK" in text


def test_failed_train_job_fixture() -> None:
    s = summarize_file(FIXTURES / "train_bert_failed.out")
    out = s.to_json()
    assert out["train"]["step"] == 3
    assert out["end"]["exit_code"] == 1
    assert out["failures"] == ["neuron_runtime_error", "traceback", "out_of_memory", "srun_error"]
    assert "TDRV:dmem_alloc_internal" in out["first_failure"]
    assert out["exception"].startswith("RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED")
    assert s.tail[-1] == "TRAINRUN-END run=bert-large-p1 job=train slurm_job_id=19 exit_code=1"
    assert "status: FAILED" in render_text(s)


def test_file_with_binary_noise_and_a_huge_line(tmp_path: Path) -> None:
    path = tmp_path / "slurm-99.out"
    data = b"".join(
        [
            b"\xff\xfe\x00\x80binary\x00noise\n",
            SEED_TRAIN[0].encode() + b"\n",
            b"z" * (3 << 20) + b"\n",  # one 3 MiB line
            b"\xc3\x28 invalid utf-8 " + SEED_TRAIN[2].encode() + b"\n",
            SEED_TRAIN[1].encode() + b"\r\n",
            b"TRAINRUN-END run=r job=train slurm_job_id=99 exit_code=0",  # no final newline
        ]
    )
    path.write_bytes(data)
    s = summarize_file(path)
    assert s.lines == 6
    assert s.train is not None and s.train.step == 16
    assert s.end == EndEvent("r", "train", 99, 0)
    assert s.unparsed_lines == 2


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.out"
    path.write_bytes(b"")
    s = summarize_file(path)
    assert s.lines == 0 and s.to_json()["train"] is None
    assert "INCOMPLETE" in render_text(s)


def test_feed_text_splits_lines() -> None:
    s = JobLogSummary().feed_text("\n".join(SEED_TRAIN))
    assert s.lines == 3 and s.train is not None and s.train.step == 16


def test_module_imports_only_the_standard_library() -> None:
    code = (
        "import sys; before = set(sys.modules); import trainrun.logic.job_log; "
        "new = set(sys.modules) - before; "
        "top = {m.split('.')[0] for m in new}; "
        "bad = sorted(t for t in top if t not in sys.stdlib_module_names and t != 'trainrun'); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_public_api() -> None:
    for name in job_log.__all__:
        assert hasattr(job_log, name), name
