"""Parse Slurm job output (compile and train jobs) into a progress summary.

Pure Python and cheap to import: the progress Lambda runs it on every CloudWatch Logs batch,
and `trainrun parse-log FILE` runs it on a whole job output file.

Recognised lines (anywhere in the line unless noted; srun `--label` (`0: `), torchrun (`[0]:`,
`[default0]:`) and other prefixes are tolerated):

- compile summaries printed by `neuron_parallel_compile`, with either tag::

    2023-08-22 19:53:37.000212:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Total graphs: 42
    2022-12-21 00:07:10.000925: INFO ||PARALLEL_COMPILE||: Total successful compilations: 6
    ... ||NEURON_PARALLEL_COMPILE||: Total failed compilations: 0

- training lines (the aws-neuron-samples format, e.g. dp_bert_large_hf_pretrain_hdf5.py)::

    [0]:LOG Wed Dec 21 00:51:01 2022 - (0, 14) step_loss : 10.7011 learning_rate : 2.80e-06 throughput : 6449.36
    LOG Thu Aug 24 16:35:59 2023 - (0, 122) step_loss : 9.8438 learning_rate : 1.22e-04 throughput : 1642.51 \
        grad-norm : 1.25   (one line; grad-norm is optional)

- training lines in the other formats of TRAIN_FORMATS (samples and their sources:
  tests/fixtures/joblogs/SOURCES.md): Hugging Face Trainer's (and Optimum Neuron's) logging dicts,
  whose step is the number of such dicts the job printed unless the dict has a `step`; tqdm bars
  of PyTorch Lightning, NeuronX Distributed Training and NeMo (`global_step=` when shown, else
  epoch x batches per epoch + batch; their throughput is the bar's iterations per second unless a
  `throughput=` is shown); plain `step 12 loss 2.31 lr 3e-4`, `step=12 loss=2.31`, `step: 12, loss:
  2.31` lines (a step number and a loss both, names as in _KV_NAMES, pairs apart); and the run's own pattern
  (workload.progress_pattern, compile_progress_pattern), tried first. None of them reads a line
  holding the end marker's tag;

- the Neuron compiler wrapper's compile cache lines, with either tag (the NEFF's path is what
  tells graphs apart: several ranks and nodes print the same line for the same graph)::

    2023-08-25 21:52:23.000453: INFO ||NCC_WRAPPER||: Using a cached neff at \
        /var/tmp/neuron-compile-cache/neuronxcc-2.8.0.25+a3ad0f342/MODULE_198775565831884870+d41d8cd9/model.neff. \
        Exiting with a successfully compiled graph.   (one line)
    2024-09-23 00:09:00.000437:  27  INFO ||NEURON_CC_WRAPPER||: Using a cached neff at <path>/model.neff. ...
    INFO ||NCC_WRAPPER||: Got a cached failed neff at <path>/model.neff. Will skip compilation, \
        please set --retry_failed_compilation for recompilation.   (one line; a failure: CACHED_FAILED_NEFF)

- `Checkpointing done` lines (counted);
- the end marker printed by the head node's end watcher, the whole line and nothing else (the
  signed fields are optional here, so that an unsigned, forged marker is still recognised as
  one; trainrun.model.end_marker decides whether a marker is authentic)::

    TRAINRUN-END run=<run_id> job=<compile|train> slurm_job_id=<int> exit_code=<int> \
        state=<SLURM_STATE> ended_at=<unix seconds> mac=<hex HMAC-SHA256>   (one line)

- known failure signatures: `traceback`, `srun_error`, `neuron_runtime_error`, `out_of_memory`,
  `neuron_workload_error` (an NRT status that blames the workload's own graph or data, e.g.
  NRT_EXEC_COMPLETED_WITH_NUM_ERR for a NaN), and the infrastructure's own
  (trainrun.logic.job_failure says which make a job worth resubmitting):
  `node_failure` (Slurm lost a node of the job)::

    srun: error: Node failure on queue1-st-trn1-1
    slurmstepd: error: *** JOB 42 ON queue1-st-trn1-2 CANCELLED AT 2024-05-21T16:08:34 DUE TO NODE FAILURE ***

  and `efa_error` (the EFA network: libfabric's EFA provider, the OFI plugin, or the Neuron
  collectives finding too few EFA devices)::

    Unable to write to EQ: Missing or unavailable event queue. err: Input/output error (5) prov/rxr/src/rxr.h:1042
    NCCL WARN NET/OFI Creating new endpoint for domain 0x7f9befa99380 failed: Invalid argument
    ERROR   ENC:enc_init_comm   global comm (2) has less channels than this replica group (4) \
        :likely not enough EFA devices found   (one line)

Only the first `MAX_LINE_CHARS` characters of a line are looked at, so a huge line costs no more
than a normal one; nothing here raises on any `str` input.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from trainrun.model.tags import RUN_ID_PATTERN

__all__ = [
    "CACHED_FAILED_NEFF",
    "FAILURE_SIGNATURES",
    "HISTORY_MAX_POINTS",
    "MAX_CACHE_NEFFS",
    "MAX_LINE_CHARS",
    "MAX_TRAIN_EPOCH",
    "MAX_TRAIN_STEP",
    "NEFF_ID_CHARS",
    "TAIL_LINES",
    "CacheEvent",
    "CheckpointEvent",
    "CompileEvent",
    "CompileSummary",
    "EndEvent",
    "Event",
    "FailureEvent",
    "JobLogSummary",
    "TrainEvent",
    "parse_line",
    "render_text",
    "summarize_file",
]

MAX_LINE_CHARS = 4096
"""Characters of a line that are parsed and kept (tail, failure text); the rest is ignored."""
HISTORY_MAX_POINTS = 500
"""Bound of `JobLogSummary.history`; when full it is thinned to every other point."""
TAIL_LINES = 50
"""Number of raw lines `JobLogSummary.tail` keeps."""
MAX_TRAIN_STEP = 1_000_000_000
"""The highest plausible step when the run declares no total_steps (the run file's own bound)."""
MAX_TRAIN_EPOCH = 1_000_000
"""The highest plausible epoch."""
FAILURE_SIGNATURES = (
    "out_of_memory",
    "node_failure",
    "efa_error",
    "neuron_runtime_error",
    "neuron_workload_error",
    "srun_error",
    "traceback",
)
"""Every failure signature name, in the order they are tested on one line."""
CACHED_FAILED_NEFF = "cached_failed_neff"
"""The failure a `Got a cached failed neff` line records: the graph failed to compile in an earlier
run, and the compiler skips it until NEURON_CC_FLAGS has --retry_failed_compilation."""
MAX_CACHE_NEFFS = 256
"""Distinct NEFFs counted per job and outcome (hit, failed); beyond it the count stays there."""
NEFF_ID_CHARS = 12
"""A NEFF is known by this many hex digits of its path's SHA-256 (48 bits: no collision among a
few hundred graphs), so that the run record keeps the set within its budget."""

JobKind = Literal["compile", "train"]
CompileField = Literal["graphs", "succeeded", "failed"]
CacheOutcome = Literal["hit", "failed"]

# --------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompileEvent:
    """One `Total ...` line of a neuron_parallel_compile summary."""

    kind: ClassVar[Literal["compile"]] = "compile"
    field: CompileField
    value: int
    tag: str  # "PARALLEL_COMPILE" or "NEURON_PARALLEL_COMPILE"


@dataclass(slots=True)
class TrainEvent:
    """One training log line: progress at (epoch, step). Not frozen only because it is built on the
    hot path (a frozen dataclass costs 4x more to construct); treat it as read-only."""

    kind: ClassVar[Literal["train"]] = "train"
    epoch: int
    step: int
    loss: float | None
    learning_rate: float | None
    throughput: float | None
    grad_norm: float | None = None
    # The line gave no step (Hugging Face Trainer's dicts, a custom pattern without `step`): the
    # step is the number of such lines the job printed so far (JobLogSummary.counted_steps).
    counted: bool = False
    format: str = "neuron"  # which of TRAIN_FORMATS the line is in


@dataclass(frozen=True, slots=True)
class CacheEvent:
    """A compile cache line of the Neuron compiler wrapper: a graph found in the cache (`hit`), or
    found there as a failed compilation (`failed`)."""

    kind: ClassVar[Literal["cache"]] = "cache"
    outcome: CacheOutcome
    neff: str  # the NEFF's path, as the line gives it
    tag: str  # "NCC_WRAPPER" or "NEURON_CC_WRAPPER"

    @property
    def neff_id(self) -> str:
        return hashlib.sha256(self.neff.encode("utf-8", "surrogatepass")).hexdigest()[:NEFF_ID_CHARS]


@dataclass(frozen=True, slots=True)
class CheckpointEvent:
    """A `Checkpointing done` line."""

    kind: ClassVar[Literal["checkpoint"]] = "checkpoint"


@dataclass(frozen=True, slots=True)
class EndEvent:
    """An end marker line: how a job ended, as the head node's end watcher reports it (state,
    ended_at and mac are None in an unsigned marker, which is never authentic)."""

    kind: ClassVar[Literal["end"]] = "end"
    run_id: str
    job: JobKind
    slurm_job_id: int
    exit_code: int
    state: str | None = None
    ended_at: int | None = None
    mac: str | None = None


@dataclass(frozen=True, slots=True)
class FailureEvent:
    """A line matching one or more known failure signatures (most specific first)."""

    kind: ClassVar[Literal["failure"]] = "failure"
    signatures: tuple[str, ...]
    text: str

    @property
    def signature(self) -> str:
        return self.signatures[0]


Event = CompileEvent | TrainEvent | CacheEvent | CheckpointEvent | EndEvent | FailureEvent

_CHECKPOINT = CheckpointEvent()

# --------------------------------------------------------------------------------------------
# Patterns. Each is only tried after a cheap substring test says it may match.
# --------------------------------------------------------------------------------------------

# The training line is printed by an f-string, so its spacing is fixed; numbers are taken as
# non-blank runs and validated by float() (which also accepts nan/inf).
_TRAIN_RE = re.compile(
    r"LOG .{0,80}? - \( *(\d{1,18}), *(\d{1,18})\) +step_loss *: *(\S{1,64}) +learning_rate *: *(\S{1,64})"
    r" +throughput *: *(\S{1,64})"
)
_GRAD_NORM_RE = re.compile(r"\bgrad[-_]norm *: *(?:tensor\()?([-+.\w]{1,64})")
_COMPILE_RE = re.compile(
    r"\|\|((?:NEURON_)?PARALLEL_COMPILE)\|\|:?\s*Total (graphs|successful compilations|failed compilations)"
    r"\s*:\s*(\d{1,18})\b"
)
_COMPILE_FIELD: dict[str, CompileField] = {
    "graphs": "graphs",
    "successful compilations": "succeeded",
    "failed compilations": "failed",
}
_CACHE_RE = re.compile(
    r"\|\|(NCC_WRAPPER|NEURON_CC_WRAPPER)\|\|:?\s*(Using a cached neff|Got a cached failed neff)"
    r" at (\S{1,2048}?\.neff)(?=[.,;:]?(?:\s|$))"
)
_CACHE_OUTCOME: dict[str, CacheOutcome] = {"Using a cached neff": "hit", "Got a cached failed neff": "failed"}
_END_RE = re.compile(
    f"TRAINRUN-END run=({RUN_ID_PATTERN})"
    r" job=(compile|train) slurm_job_id=(\d{1,18}) exit_code=(-?\d{1,9})"
    r"(?: state=([A-Z_]{1,40}) ended_at=(\d{1,12}) mac=([0-9a-f]{64}))?"
)
# A short label before a traceback/exception: srun --label "  3: ", torchrun "[0]:" / "[default0]:",
# mpirun --tag-output "[1,0]<stderr>:", pdsh-like "node-1: ".
_PREFIX = r"[ \t]*(?:\[[\w.,:-]{0,40}\](?:<\w{1,10}>)?:?|[\w.-]{1,64}:)?[ \t]*"
_TRACEBACK_RE = re.compile(_PREFIX + r"Traceback \(most recent call last\):")
_EXCEPTION_RE = re.compile(_PREFIX + r"((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b.*)")
_OOM_RE = re.compile(r"(?i:out of memory|cannot allocate memory|oom[-_ ]?kill)|\bOOM\b|\bMemoryError\b|std::bad_alloc")
# Neuron runtime / driver log lines at ERROR level: "... 1234:1234 ERROR  NRT:nrt_init  ...".
_NRT_ERROR_RE = re.compile(r"\bERROR\s+(?:NRT|TDRV|NMGR|ENC|NCCL)\s*:")
# NRT_STATUS codes other than NRT_SUCCESS.
_NRT_STATUS_RE = re.compile(
    r"\bNRT_(?:FAILURE|INVALID\w*|RESOURCE|TIMEOUT|HW_ERROR|QUEUE_FULL|LOAD_NOT_ENOUGH_NC"
    r"|UNSUPPORTED_NEFF_VERSION|FAIL_HOST_MEM_ALLOC|UNINITIALIZED|CLOSED|EXEC_\w+|COLL_\w+)\b"
)
# NRT_STATUS codes that blame what the workload gave the runtime, not the device (the Neuron
# runtime's nrt_status.h): a NaN produced (NRT_EXEC_COMPLETED_WITH_NUM_ERR), an invalid NEFF or
# tensor (NRT_INVALID, NRT_EXEC_BAD_INPUT), an out-of-bounds copy (NRT_EXEC_OOB), a NEFF this
# runtime cannot load (NRT_UNSUPPORTED_NEFF_VERSION). A resubmission would fail the same way.
_NRT_WORKLOAD_STATUS_RE = re.compile(
    r"\bNRT_(?:EXEC_COMPLETED_WITH_NUM_ERR|INVALID|EXEC_BAD_INPUT|EXEC_OOB|UNSUPPORTED_NEFF_VERSION)\b"
)
# An nrt_* call, a NEURON_RT* setting or "Neuron runtime" mentioned together with a failure word.
_NRT_FAIL_RE = re.compile(
    r"(?:\bnrt_\w+|\bNEURON_RT\w*|(?i:\bneuron runtime\b))[^\n]{0,200}?\b(?:[Ff]ail(?:ed|ure|s)?|[Ee]rror)\b"
    r"|\b(?:[Ff]ail(?:ed|ure|s)?|[Ee]rror)\b[^\n]{0,200}?(?:\bnrt_\w+|(?i:\bneuron runtime\b))"
)
# Slurm's words for a node lost under a job: srun's, and slurmstepd's when it cancels the job.
_NODE_FAILURE_RE = re.compile(r"\bsrun: error: Node failure on \S|\bDUE TO NODE FAILURE\b")
# The EFA network failing: libfabric's EFA provider (prov/efa, prov/rxr) or the OFI plugin
# (NET/OFI) reporting an error, or the Neuron collectives (ENC) naming EFA in an error.
_EFA_ERROR_RE = re.compile(
    r"\bprov/(?:efa|rxr)/"
    r"|\bNET/OFI\b[^\n]{0,300}?(?i:\b(?:fail(?:ed|ure)?|error|unable)\b)"
    r"|\bERROR\s+ENC\s*:[^\n]{0,400}?\bEFA\b"
    r"|\bEFA\b[^\n]{0,100}?\b(?:error|failed|failure)\b"
)
_TRACEBACK_TEXT = "Traceback (most recent call last):"

# --------------------------------------------------------------------------------------------
# Other training log formats (TRAIN_FORMATS). Each is tried only on a line that has a loss (or
# the custom pattern's own test) and never on one holding the end marker's tag: no format can
# turn an end marker into something else, or a training line into an end marker.
# --------------------------------------------------------------------------------------------

TRAIN_FORMATS: dict[str, str] = {
    "neuron": "LOG <time> - (<epoch>, <step>) step_loss : X learning_rate : Y throughput : Z"
    " (aws-neuron-samples, NeuronX Distributed's examples)",
    "hf_trainer": "{'loss': X, 'grad_norm': G, 'learning_rate': Y, 'epoch': E} (Hugging Face Trainer,"
    " Optimum Neuron's NeuronTrainer; the step is counted when the dict has no 'step')",
    "progress_bar": "Epoch E: 45%|...| 45/100 [00:10<00:12, 4.50it/s, loss=X, ...] (PyTorch Lightning,"
    " NeuronX Distributed Training, NeMo)",
    "key_value": "step 12 loss 2.31 lr 3e-4 / step=12 loss=2.31 / step: 12, loss: 2.31 (plain lines)",
}
"""The training log formats read without a custom pattern, for messages that say which."""
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf)"
# Hugging Face Trainer prints its logs dict with str(): `{'loss': 2.31, 'learning_rate': 3e-05, ...}`
# (transformers' ProgressCallback.on_log); some versions print tensor(...) values.
_HF_DICT_RE = re.compile(r"""\{\s*['"]loss['"]\s*:""")
_HF_PAIR_RE = re.compile(r"""['"](\w{1,40})['"]\s*:\s*(?:tensor\()?(""" + _NUM + ")")
# tqdm's bar as PyTorch Lightning's TQDMProgressBar draws it (NeuronX Distributed Training and
# NeMo use it too): `Epoch 3: 45%|####5 | 45/100 [00:10<00:12, 4.50it/s, v_num=0, train_loss=2.310]`,
# `Epoch 1: : 1it [00:04,  4.36s/it, ...]` without a total.
_BAR_RE = re.compile(
    r"\bEpoch (\d{1,9})(?:/\d{1,9})?:[ :]*(?:\d{1,3}% *(?:\|[^|]{0,200}\|)?)?"
    r" *(\d{1,12})(?:/(\d{1,12}))?(?:it)? *\[([^\]]{0,3000})\]"
)
_BAR_RATE_RE = re.compile(r"(\d+(?:\.\d+)?) *(it/s|s/it)\b")
_BAR_PAIR_RE = re.compile(r"(?:^|, *)([A-Za-z_][\w/.-]{0,60}(?: in s)?)=(" + _NUM + ")")
# Plain lines: a known name, then optionally `=` or `:`, then a number (and `/total` for a step).
_KV_NAMES: dict[str, str] = {
    "step": "step",
    "global_step": "step",
    "iter": "step",
    "iteration": "step",
    "epoch": "epoch",
    "loss": "loss",
    "train_loss": "loss",
    "training_loss": "loss",
    "step_loss": "loss",
    "lr": "learning_rate",
    "learning_rate": "learning_rate",
    "throughput": "throughput",
    "grad_norm": "grad_norm",
    "grad-norm": "grad_norm",
    "gnorm": "grad_norm",
}
_KV_RE = re.compile(
    r"(?<![\w-])(?i:(global_step|step|iteration|iter|epoch|train_loss|training_loss|step_loss|loss|learning_rate|lr"
    r"|throughput|grad[-_]norm|gnorm))\b *[:=]? *(" + _NUM + r")(?:/\d{1,12})?(?![\w.]|:\S)"
)
# A value glued to the next word by a colon (`step:0:loss=nan`) is a path, a time or a tag, not a
# pair: real plain progress lines separate their pairs (`step: 12, loss: 2.31`, `iter 110: loss 3.9`).
# Which of a progress bar's or dict's keys carry what, most specific first.
_LOSS_KEYS = ("reduced_train_loss", "train_loss_step", "train_loss", "loss", "step_loss")
_LR_KEYS = ("lr", "learning_rate")
_THROUGHPUT_KEYS = ("throughput", "samples/sec", "tokens_per_sec")
_GRAD_NORM_KEYS = ("gradient_norm", "grad_norm", "grad-norm")
_END_TAG = "TRAINRUN-END"
PATTERN_GROUPS = ("step", "epoch", "loss", "learning_rate", "throughput", "grad_norm")
"""The named groups a custom progress pattern (workload.progress_pattern) may have."""
MAX_PATTERN_CHARS = 300
"""A custom pattern's length at most."""


def compile_progress_pattern(text: str) -> re.Pattern[str]:
    """The custom progress pattern of a run file, compiled; ValueError naming the fix if it is
    not one trainrun can use (it runs on every line of the job's output, so it is bounded)."""
    if len(text) > MAX_PATTERN_CHARS:
        raise ValueError(
            f"is {len(text)} characters; keep it under {MAX_PATTERN_CHARS} (match the line's progress part only)"
        )
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise ValueError(f"is not a Python regular expression ({exc}); check its brackets and escapes") from exc
    unknown = sorted(set(pattern.groupindex) - set(PATTERN_GROUPS))
    if unknown:
        raise ValueError(
            f"has group(s) {', '.join(unknown)}; the named groups it may have are {', '.join(PATTERN_GROUPS)}"
        )
    if "step" not in pattern.groupindex and "loss" not in pattern.groupindex:
        raise ValueError(r"has no (?P<step>...) or (?P<loss>...) group; name at least one, e.g. step (?P<step>\d+)")
    if _NESTED_QUANTIFIER_RE.search(text):
        raise ValueError(
            "repeats a repeated group (e.g. (a+)+), which can take exponential time on a hostile line; "
            "repeat the inner part only"
        )
    return pattern


# A group quantified inside and out: the classic catastrophic backtracking shape.
_NESTED_QUANTIFIER_RE = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)[+*{]")


def _int(text: str | None) -> int | None:
    """An integer from a number that may be printed as a float (`global_step=188.0`, `2e+3`)."""
    if text is None:
        return None
    value = _float(text)
    if value is None or not math.isfinite(value) or value < 0 or value > 2**62:
        return None
    return int(value)


def _first(values: dict[str, str], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        if key in values:
            return _float(values[key])
    return None


def _train_event(values: dict[str, str], fmt: str, loss_keys: tuple[str, ...] = _LOSS_KEYS) -> TrainEvent | None:
    """A TrainEvent from named values (a dict, a bar, key/value pairs), None without step or loss."""
    loss = _first(values, loss_keys)
    step = _int(values.get("step") or values.get("global_step"))
    if loss is None and step is None:
        return None
    epoch = _int(values.get("epoch")) or 0
    return TrainEvent(
        epoch,
        step or 0,
        loss,
        _first(values, _LR_KEYS),
        _first(values, _THROUGHPUT_KEYS),
        _first(values, _GRAD_NORM_KEYS),
        counted=step is None,
        format=fmt,
    )


def _hf_trainer(line: str) -> TrainEvent | None:
    m = _HF_DICT_RE.search(line)
    if m is None:
        return None
    values = dict(_HF_PAIR_RE.findall(line, m.start()))
    return _train_event(values, "hf_trainer", ("loss",))


def _progress_bar(line: str) -> TrainEvent | None:
    m = _BAR_RE.search(line)
    if m is None:
        return None
    epoch, position, total, inside = m.groups()
    values = {key: value for key, value in _BAR_PAIR_RE.findall(inside)}
    if _first(values, _LOSS_KEYS) is None:
        return None  # a bar without a loss (validation, or before the first log) is not progress
    if "global_step" not in values:
        # Lightning's bar counts batches within the epoch; the run's step is past the earlier epochs.
        values["step"] = str(int(epoch) * int(total) + int(position) if total else int(position))
    values["epoch"] = epoch
    rate = _BAR_RATE_RE.search(inside)
    if rate is not None and not any(key in values for key in _THROUGHPUT_KEYS):
        per_second = float(rate.group(1))
        if rate.group(2) == "s/it":
            per_second = 1 / per_second if per_second else 0.0
        values["throughput"] = str(per_second)  # iterations per second: the bar's own rate
    return _train_event(values, "progress_bar")


def _key_values(line: str) -> TrainEvent | None:
    values: dict[str, str] = {}
    for name, value in _KV_RE.findall(line):
        values.setdefault(_KV_NAMES[name.lower()], value)
    if _int(values.get("step")) is None or "loss" not in values:
        return None  # a real step and a loss both, or a line that merely mentions a loss is read as progress
    return _train_event(values, "key_value", ("loss",))


def _custom(line: str, pattern: re.Pattern[str]) -> TrainEvent | None:
    m = pattern.search(line)
    if m is None:
        return None
    values = {key: value for key, value in m.groupdict().items() if value is not None}
    return _train_event(values, "custom", ("loss",))


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _failure_signatures(line: str) -> tuple[str, ...]:
    sigs: list[str] = []
    if ("emory" in line or "MEMORY" in line or "OOM" in line or "oom" in line or "bad_alloc" in line) and (
        _OOM_RE.search(line) is not None
    ):
        sigs.append("out_of_memory")
    if ("Node failure" in line or "NODE FAILURE" in line) and _NODE_FAILURE_RE.search(line) is not None:
        sigs.append("node_failure")
    if ("EFA" in line or "OFI" in line or "prov/" in line) and _EFA_ERROR_RE.search(line) is not None:
        sigs.append("efa_error")
    if (
        ("ERROR" in line and _NRT_ERROR_RE.search(line) is not None)
        or ("NRT_" in line and _NRT_STATUS_RE.search(line) is not None)
        or (
            ("ail" in line or "rror" in line)
            and ("nrt_" in line or "NEURON_RT" in line or "untime" in line)
            and _NRT_FAIL_RE.search(line) is not None
        )
    ):
        sigs.append("neuron_runtime_error")
    if "NRT_" in line and _NRT_WORKLOAD_STATUS_RE.search(line) is not None:
        sigs.append("neuron_workload_error")
    if "srun: error:" in line or "slurmstepd: error:" in line:
        sigs.append("srun_error")
    if _TRACEBACK_TEXT in line and _TRACEBACK_RE.match(line) is not None:
        sigs.append("traceback")
    return tuple(sigs)


def _other_train_formats(line: str, pattern: re.Pattern[str] | None) -> TrainEvent | None:
    """The training formats after the Neuron samples' one: the run's own pattern first."""
    if _END_TAG in line:
        return None
    if pattern is not None:
        event = _custom(line, pattern)
        if event is not None:
            return event
    if "oss" not in line:  # loss, Loss, LOSS: every built-in format below names one
        return None
    if "loss" in line and "{" in line:
        event = _hf_trainer(line)
        if event is not None:
            return event
    if "Epoch " in line and "[" in line:
        event = _progress_bar(line)
        if event is not None:
            return event
    return _key_values(line)


def _classify(line: str, pattern: re.Pattern[str] | None = None) -> Event | None:
    """Parse one line already cut to MAX_LINE_CHARS and stripped of its line ending; `pattern`:
    the run's custom progress pattern (compile_progress_pattern), if any."""
    if "step_loss" in line:
        m = _TRAIN_RE.search(line)
        if m is not None:
            epoch, step, loss, lr, tp = m.groups()
            try:
                event = TrainEvent(int(epoch), int(step), float(loss), float(lr), float(tp))
            except ValueError:
                event = None
            if event is not None:
                if "grad" in line:
                    g = _GRAD_NORM_RE.search(line, m.end())
                    if g is not None:
                        event.grad_norm = _float(g.group(1))
                return event
    other = _other_train_formats(line, pattern)
    if other is not None:
        return other
    if "PARALLEL_COMPILE||" in line:
        m = _COMPILE_RE.search(line)
        if m is not None:
            return CompileEvent(_COMPILE_FIELD[m.group(2)], int(m.group(3)), m.group(1))
    if "cached " in line and "WRAPPER||" in line:
        m = _CACHE_RE.search(line)
        if m is not None:
            return CacheEvent(_CACHE_OUTCOME[m.group(2)], m.group(3), m.group(1))
    if "Checkpointing done" in line:
        return _CHECKPOINT
    if "TRAINRUN-END" in line:
        m = _END_RE.fullmatch(line.strip())
        if m is not None:
            run_id, job, slurm_job_id, exit_code, state, ended_at, mac = m.groups()
            return EndEvent(
                run_id,
                "compile" if job == "compile" else "train",
                int(slurm_job_id),
                int(exit_code),
                state,
                int(ended_at) if ended_at is not None else None,
                mac,
            )
    sigs = _failure_signatures(line)
    if sigs:
        return FailureEvent(sigs, line.replace("\x00", "\ufffd").strip())
    return None


def _prepare(line: str) -> str:
    """Cut to MAX_LINE_CHARS, drop the line ending, keep what a terminal shows after a CR."""
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS]
    line = line.rstrip("\r\n")
    if "\r" in line:  # progress bars redraw with CR: the last segment is what is on screen
        line = line.rpartition("\r")[2]
    return line


def parse_line(line: str, pattern: re.Pattern[str] | None = None) -> Event | None:
    """Parse one job output line; None if it is none of the recognised kinds. Never raises on a str.
    A training line without a step (TrainEvent.counted) has step 0 here: JobLogSummary counts them."""
    return _classify(_prepare(line), pattern)


# --------------------------------------------------------------------------------------------
# Accumulated summary
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class CompileSummary:
    """Compile totals. With several workers (srun over N nodes) each field is the maximum reported,
    so a failure reported by any worker is never hidden by another worker's clean summary."""

    graphs: int | None = None
    succeeded: int | None = None
    failed: int | None = None

    def to_json(self) -> dict[str, int | None]:
        return {"graphs": self.graphs, "succeeded": self.succeeded, "failed": self.failed}


def _finite(value: float | None) -> float | None:
    """JSON (and DynamoDB) have no NaN/Infinity: those become null in to_json()."""
    if value is None or not math.isfinite(value):
        return None
    return value


HistoryPoint = tuple[int, float | None, float | None, float | None]  # (step, loss, learning_rate, throughput)


class JobLogSummary:
    """Mutable accumulator over the lines of one job's output (any order, duplicates allowed).

    Attributes:
        compile: totals of the neuron_parallel_compile summary, or None if none was seen.
        cache_hits, cached_failures: the distinct NEFFs (their ids, CacheEvent.neff_id) the job
            found in the Neuron compile cache, and found there as failed compilations; at most
            MAX_CACHE_NEFFS each. A failed one also records the failure CACHED_FAILED_NEFF.
        train: the training event at the highest (epoch, step) seen, or None. A lower step
            arriving later never moves it back.
        checkpoints: number of `Checkpointing done` lines.
        end: the last end marker seen, or None.
        failures: failure signature names, unique, in order of first appearance.
        first_failure: text of the first line that matched a failure signature.
        exception: first `SomethingError: message` line after a traceback (the error itself).
        lines: every line fed, blank ones included.
        unparsed_lines: non-blank lines that matched nothing.
        rejected_steps: training lines ignored because their step is beyond `step_limit` (the
            run's total_steps, else MAX_TRAIN_STEP) or their epoch beyond MAX_TRAIN_EPOCH: one
            such line would otherwise pin the step for good.
        history: at most HISTORY_MAX_POINTS (step, loss, learning_rate, throughput) points spanning
            the run; when full it keeps every other point and then samples half as often.
        tail: the last TAIL_LINES raw lines (each cut to MAX_LINE_CHARS).
        pattern: the run's custom progress pattern (compile_progress_pattern), tried first.
        counted_steps: training lines without a step seen so far, from `counted_from` (the count
            of earlier batches): such a line's step is this count. None: such lines are skipped
            (a redelivered batch, whose lines were counted when it was first applied).
    """

    __slots__ = (
        "_await_exception",
        "_history",
        "_history_seen",
        "_history_stride",
        "_tail",
        "cache_hits",
        "cached_failures",
        "checkpoints",
        "compile",
        "counted_steps",
        "end",
        "exception",
        "failures",
        "first_failure",
        "lines",
        "pattern",
        "rejected_steps",
        "step_limit",
        "train",
        "unparsed_lines",
    )

    def __init__(
        self, step_limit: int | None = None, pattern: re.Pattern[str] | None = None, counted_from: int | None = 0
    ) -> None:
        self.pattern = pattern
        self.counted_steps = counted_from
        self.step_limit = MAX_TRAIN_STEP if step_limit is None else min(step_limit, MAX_TRAIN_STEP)
        self.rejected_steps = 0
        self.compile: CompileSummary | None = None
        self.train: TrainEvent | None = None
        self.checkpoints = 0
        self.cache_hits: set[str] = set()
        self.cached_failures: set[str] = set()
        self.end: EndEvent | None = None
        self.failures: list[str] = []
        self.first_failure: str | None = None
        self.exception: str | None = None
        self.lines = 0
        self.unparsed_lines = 0
        self._history: list[HistoryPoint] = []
        self._history_seen = 0  # training events that advanced the highest step
        self._history_stride = 1
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._await_exception = False

    # -- feeding ---------------------------------------------------------------------------

    def feed(self, line: str) -> Event | None:
        """Account for one line (with or without its line ending); returns what it parsed as."""
        self.lines += 1
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS]
        line = line.rstrip("\r\n")
        if "\r" in line:
            line = line.rpartition("\r")[2]
        self._tail.append(line)
        event = _classify(line, self.pattern)
        if event is None:
            if self._await_exception:
                self._note_exception(line)
            if line and not line.isspace():
                self.unparsed_lines += 1
            return None
        if isinstance(event, TrainEvent):
            if event.counted:
                if self.counted_steps is None:
                    return None
                self.counted_steps += 1
                event.step = self.counted_steps
            if event.step > self.step_limit or event.epoch > MAX_TRAIN_EPOCH:
                self.rejected_steps += 1
                return None
            self._on_train(event)
        elif isinstance(event, FailureEvent):
            self._on_failure(event)
        elif isinstance(event, CompileEvent):
            self._on_compile(event)
        elif isinstance(event, CacheEvent):
            self._on_cache(event, line)
        elif isinstance(event, CheckpointEvent):
            self.checkpoints += 1
        else:
            self.end = event
        return event

    def feed_lines(self, lines: Iterable[str]) -> JobLogSummary:
        """Feed every line of an iterable (e.g. an open file or a list of log event messages)."""
        feed = self.feed
        for line in lines:
            feed(line)
        return self

    def feed_text(self, text: str) -> JobLogSummary:
        """Feed a block of text holding several newline-separated lines."""
        return self.feed_lines(text.split("\n"))

    def _on_train(self, event: TrainEvent) -> None:
        current = self.train
        if current is not None and (event.epoch, event.step) <= (current.epoch, current.step):
            return  # duplicate or out of order: progress never moves back
        self.train = event
        seen = self._history_seen
        self._history_seen = seen + 1
        if seen % self._history_stride:
            return
        history = self._history
        if len(history) >= HISTORY_MAX_POINTS:
            del history[1::2]
            self._history_stride *= 2
            if seen % self._history_stride:
                return
        history.append((event.step, event.loss, event.learning_rate, event.throughput))

    def _on_failure(self, event: FailureEvent) -> None:
        if self.first_failure is None:
            self.first_failure = event.text
        failures = self.failures
        for sig in event.signatures:
            if sig not in failures:
                failures.append(sig)
        if "traceback" in event.signatures:
            self._await_exception = self.exception is None
        elif self._await_exception:
            self._note_exception(event.text)

    def _on_cache(self, event: CacheEvent, line: str) -> None:
        found = self.cache_hits if event.outcome == "hit" else self.cached_failures
        if len(found) < MAX_CACHE_NEFFS:
            found.add(event.neff_id)
        if event.outcome == "failed":
            # The line says the graph is skipped and how to compile it again: the failure to show.
            self._on_failure(FailureEvent((CACHED_FAILED_NEFF,), line.replace("\x00", "\ufffd").strip()))

    def _note_exception(self, line: str) -> None:
        m = _EXCEPTION_RE.match(line)
        if m is not None:
            self.exception = m.group(1).replace("\x00", "\ufffd").strip()
            self._await_exception = False

    def _on_compile(self, event: CompileEvent) -> None:
        summary = self.compile
        if summary is None:
            summary = self.compile = CompileSummary()
        previous = getattr(summary, event.field)
        if previous is None or event.value > previous:
            setattr(summary, event.field, event.value)

    # -- reading ---------------------------------------------------------------------------

    @property
    def history(self) -> list[HistoryPoint]:
        """Sampled (step, loss, learning_rate, throughput) points, always ending at the latest."""
        points = list(self._history)
        train = self.train
        if train is not None and (not points or points[-1][0] != train.step):
            points.append((train.step, train.loss, train.learning_rate, train.throughput))
        return points

    @property
    def tail(self) -> list[str]:
        """The last TAIL_LINES lines, NUL bytes replaced."""
        return [line.replace("\x00", "\ufffd") for line in self._tail]

    @property
    def failed(self) -> bool:
        """True if a failure signature was seen or the end marker carries a non-zero exit code."""
        return bool(self.failures) or (self.end is not None and self.end.exit_code != 0)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (non-finite floats become null)."""
        train = self.train
        end = self.end
        return {
            "compile": self.compile.to_json() if self.compile is not None else None,
            "train": None
            if train is None
            else {
                "epoch": train.epoch,
                "step": train.step,
                "loss": _finite(train.loss),
                "learning_rate": _finite(train.learning_rate),
                "throughput": _finite(train.throughput),
                "grad_norm": _finite(train.grad_norm),
            },
            "cache": {"hits": len(self.cache_hits), "failed": len(self.cached_failures)},
            "checkpoints": self.checkpoints,
            "end": None
            if end is None
            else {"job": end.job, "slurm_job_id": end.slurm_job_id, "exit_code": end.exit_code, "run_id": end.run_id},
            "failures": list(self.failures),
            "first_failure": self.first_failure,
            "exception": self.exception,
            "lines": self.lines,
            "unparsed_lines": self.unparsed_lines,
            # Points as the run record keeps them (trainrun.model.jobs.TrainPoint): named, not positional.
            "history": [
                {"step": step, "loss": _finite(loss), "learning_rate": _finite(lr), "throughput": _finite(tp)}
                for step, loss, lr, tp in self.history
            ],
        }

    def __repr__(self) -> str:
        return f"JobLogSummary({self.to_json()!r})"


# --------------------------------------------------------------------------------------------
# Files and text
# --------------------------------------------------------------------------------------------

_READ_LIMIT = 64 * 1024


def _iter_bounded_lines(stream: Any) -> Iterator[str]:
    """Lines of a text stream, each at most _READ_LIMIT characters: the rest of a longer line is
    skipped, so a file with one enormous line never has to fit in memory."""
    readline = stream.readline
    while True:
        chunk = readline(_READ_LIMIT)
        if not chunk:
            return
        yield chunk
        while not chunk.endswith("\n"):
            chunk = readline(_READ_LIMIT)
            if not chunk:
                return


def summarize_file(path: Any, pattern: re.Pattern[str] | None = None) -> JobLogSummary:
    """Summarise a job output file (`pattern`: a run's progress_pattern); undecodable bytes become
    U+FFFD, nothing raises on content."""
    summary = JobLogSummary(pattern=pattern)
    with open(path, encoding="utf-8", errors="replace", newline="\n") as stream:
        summary.feed_lines(_iter_bounded_lines(stream))
    return summary


def _fmt(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    return format(value, spec)


def render_text(summary: JobLogSummary) -> str:
    """A short human summary (for `trainrun parse-log FILE`)."""
    out = [f"lines: {summary.lines} ({summary.unparsed_lines} unparsed)"]
    comp = summary.compile
    if comp is not None:

        def n(v: int | None) -> str:
            return "?" if v is None else str(v)

        out.append(f"compile: {n(comp.graphs)} graphs, {n(comp.succeeded)} succeeded, {n(comp.failed)} failed")
    train = summary.train
    if train is not None:
        text = (
            f"train: epoch {train.epoch} step {train.step}  loss {_fmt(train.loss, '.4f')}"
            f"  learning_rate {_fmt(train.learning_rate, '.2e')}  throughput {_fmt(train.throughput, '.2f')}"
        )
        if train.grad_norm is not None:
            text += f"  grad-norm {_fmt(train.grad_norm, '.4g')}"
        text += f"  ({train.format} format{', steps counted' if train.counted else ''})"
        out.append(text)
        history = summary.history
        if len(history) > 1:
            first, last = history[0], history[-1]
            out.append(f"loss: {_fmt(first[1], '.4f')} at step {first[0]} -> {_fmt(last[1], '.4f')} at step {last[0]}")
    elif summary.unparsed_lines:
        out.append(
            "train: no line carried training progress in a format trainrun reads (docs/run-file.md, "
            "Training progress); --pattern reads your own"
        )
    if summary.cache_hits or summary.cached_failures:
        out.append(
            f"compile cache: {len(summary.cache_hits)} graphs found, {len(summary.cached_failures)} found as failed"
        )
    if summary.checkpoints:
        out.append(f"checkpoints: {summary.checkpoints}")
    end = summary.end
    if end is not None:
        out.append(f"end: {end.job} job {end.slurm_job_id} of run {end.run_id} exited with code {end.exit_code}")
    else:
        out.append("end: no end marker (job still running, or killed before the wrapper could report)")
    if summary.failures:
        out.append("failures: " + ", ".join(summary.failures))
        if summary.first_failure is not None:
            out.append(f"first failure: {_clip(summary.first_failure)}")
        if summary.exception is not None:
            out.append(f"exception: {_clip(summary.exception)}")
    status = "FAILED" if summary.failed else ("OK" if end is not None else "INCOMPLETE")
    out.append(f"status: {status}")
    return "\n".join(out)


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
