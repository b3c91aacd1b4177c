"""The run record's size: the record is one DynamoDB item, and DynamoDB refuses an item over
400 KB (409,600 bytes: the UTF-8 bytes of every attribute's name and value; "DynamoDB item
sizes and formats" in the DynamoDB developer guide). A refused write would end a run without its
findings, or fail every later progress write, so each part of the record has a byte budget,
enforced whatever the input, here and by trainrun.model.run_record's store (nested values are
stored as UTF-8 JSON; the size of each is its encoded length):

| part                           | budget (bytes)                                         |
|--------------------------------|--------------------------------------------------------|
| spec                           | MAX_SPEC_BYTES (98,304; the run file model refuses more) |
| findings                       | MAX_FINDINGS x (MAX_FINDING_MESSAGE_BYTES + 64) = 34,816  |
| error, teardown_error, cancel_request | 3 x (MAX_ERROR_NAME_BYTES + MAX_ERROR_CAUSE_BYTES + 32) = 25,440 |
| progress_compile, progress_train | 2 x MAX_PROGRESS_BYTES = 114,688 (history thinned to fit) |
| run_file                       | S3: key <= 1,024 UTF-8 bytes (<= 6,144 escaped), version id <= 1,024: < 8,400 |
| job_compile, job_train         | 2 x (task token <= 2,048 + ~300)                        |
| the jobs' ended attempts       | 2 x (MAX_RETRIES + 1 = 11) x (MAX_ATTEMPT_WHY_BYTES + ~250) = 16,764 |
| everything else (ids, times, names) | < 4,000                                           |

That is under 300 KB in all (299,210 bytes measured), more than 100 KB below DynamoDB's limit;
the tests build the largest record and check it (tests/unit/test_record_size.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

from trainrun.model.findings import Finding, Severity
from trainrun.model.jobs import JobProgress

DYNAMODB_ITEM_LIMIT_BYTES = 400 * 1024  # DynamoDB's 1 KB is 1,024 bytes
MAX_SPEC_BYTES = 96 * 1024
MAX_FINDINGS = 32
MAX_FINDING_MESSAGE_BYTES = 1024
MAX_ERROR_NAME_BYTES = 256
MAX_ERROR_CAUSE_BYTES = 8 * 1024
# 48 KiB for what the log said (history thinned to fit), and 8 KiB for the NEFFs found in the
# compile cache: at most 2 x job_log.MAX_CACHE_NEFFS ids of job_log.NEFF_ID_CHARS digits (7,680
# bytes as JSON), which the history's thinning leaves alone.
MAX_PROGRESS_BYTES = 56 * 1024
# The newest history points are kept as they are when a progress must be thinned to fit.
RECENT_HISTORY_POINTS = 64
MAX_FAILURES = 16
MAX_FAILURE_BYTES = 256
# Why an attempt of the train job ended (trainrun.steps.resume): a line for a person.
MAX_ATTEMPT_WHY_BYTES = 512
_SURROGATES = re.compile(r"[\ud800-\udfff]")
_CUT = " …[cut]"


def encode_json(value: Any) -> str:
    """A nested value as the record stores it: compact JSON, non-ASCII as UTF-8 (DynamoDB counts bytes).

    json.dumps' default escapes every non-ASCII character to 6 or 12 bytes; UTF-8 takes 2 to 4.
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _json_cost(character: str) -> int:
    """Bytes one character takes inside a JSON string, encoded as UTF-8."""
    if character in '"\\' or character in "\n\r\t\b\f":
        return 2
    if ord(character) < 0x20:
        return 6  # \u00XX
    return len(character.encode())


def clip_text(text: str, max_bytes: int) -> str:
    """`text`, cut so that it takes at most `max_bytes` inside a stored JSON string (UTF-8).

    A lone surrogate (JSON can carry one, UTF-8 cannot) becomes U+FFFD, so the text can be stored at all.
    """
    text = _SURROGATES.sub("\ufffd", text)
    if len(text) * 6 <= max_bytes or sum(map(_json_cost, text)) <= max_bytes:
        return text
    budget = max_bytes - sum(map(_json_cost, _CUT))
    used = 0
    for index, character in enumerate(text):
        used += _json_cost(character)
        if used > budget:
            return text[:index] + _CUT
    return text  # unreachable: the whole text was over the budget


def bounded_findings(findings: list[Finding]) -> list[Finding]:
    """The findings, each message within MAX_FINDING_MESSAGE_BYTES; past MAX_FINDINGS, the errors
    first and a last finding that counts the ones left out."""
    ordered = list(findings)
    if len(ordered) > MAX_FINDINGS:
        ordered.sort(key=lambda finding: finding.severity != Severity.ERROR)
        kept, left = ordered[: MAX_FINDINGS - 1], ordered[MAX_FINDINGS - 1 :]
        ordered = [
            *kept,
            Finding(
                code=left[0].code,
                severity=left[0].severity,
                message=f"and {len(left)} more findings the run record does not keep (it keeps {MAX_FINDINGS}); "
                "`trainrun validate` on the run file lists every run-file problem",
            ),
        ]
    return [
        finding.model_copy(update={"message": clip_text(finding.message, MAX_FINDING_MESSAGE_BYTES)})
        for finding in ordered
    ]


def encode_progress(progress: JobProgress) -> str:
    """The progress as stored, within MAX_PROGRESS_BYTES whatever the job printed.

    progress.py already keeps at most job_log.HISTORY_MAX_POINTS points; when even those do not
    fit (absurd numbers in the log), the newest RECENT_HISTORY_POINTS are kept and the older ones
    thinned by half until it fits, as a plot needs the recent points most.
    """
    encoded = progress.model_dump_json()
    if len(encoded.encode()) <= MAX_PROGRESS_BYTES:
        return encoded
    failures = [clip_text(failure, MAX_FAILURE_BYTES) for failure in progress.failures[:MAX_FAILURES]]
    history = list(progress.history)
    while True:
        encoded = progress.model_copy(update={"failures": failures, "history": history}).model_dump_json()
        if len(encoded.encode()) <= MAX_PROGRESS_BYTES or not history:
            return encoded
        older, recent = history[:-RECENT_HISTORY_POINTS], history[-RECENT_HISTORY_POINTS:]
        history = older[1::2] + recent if older else recent[len(recent) // 2 + 1 :]


def item_size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it: each attribute's name and value, strings as UTF-8 bytes.

    Numbers count (significant digits / 2) + 1 bytes; this counts one byte a digit, an upper bound.
    """
    total = 0
    for name, value in item.items():
        total += len(name.encode())
        if "S" in value:
            total += len(value["S"].encode())
        elif "N" in value:
            total += len(value["N"]) + 1
        else:
            raise ValueError(f"{name}: the run record stores only strings and numbers, not {sorted(value)}")
    return total
