"""`trainrun parse-log` as a person (or a script) runs it: its exit code says whether the job failed."""

from __future__ import annotations

import json

from .conftest import ROOT, trainrun

JOBLOGS = ROOT / "tests" / "fixtures" / "joblogs"


def test_parse_log_of_a_job_that_failed_exits_1_saying_so() -> None:
    for args in ([], ["--json"]):
        result = trainrun("parse-log", JOBLOGS / "train_bert_failed.out", *args)
        assert result.returncode == 1, result.stderr
    assert "status: FAILED" in trainrun("parse-log", JOBLOGS / "train_bert_failed.out").stdout


def test_parse_log_of_a_job_that_succeeded_exits_0_with_its_history_as_named_points() -> None:
    result = trainrun("parse-log", JOBLOGS / "train_bert_ok.out", "--json")
    assert result.returncode == 0, result.stderr
    history = json.loads(result.stdout)["history"]
    assert len(history) == 40
    assert set(history[0]) == {"step", "loss", "learning_rate", "throughput"}
    assert [point["step"] for point in history] == list(range(1, 41))


def test_parse_log_reads_the_issue_scripts_plain_lines() -> None:
    # Given the job output of a script printing `step 12 loss 2.31 lr 3e-4` (3 of 3 lines were unparsed)
    result = trainrun("parse-log", JOBLOGS / "train_key_value.out", "--json")
    # Then every line is read, and the last step is the train step
    summary = json.loads(result.stdout)
    assert (summary["unparsed_lines"], summary["train"]["step"], summary["train"]["loss"]) == (0, 130, 3.65)


def test_parse_log_with_a_pattern_reads_a_format_it_does_not_know(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.out"
    log.write_text("it=3 obj=4.5\nit=4 obj=4.25\n")
    # Without the pattern, it says no line carried progress and where the fix is
    assert "--pattern reads your own" in trainrun("parse-log", log).stdout
    # With it, the step and loss are read
    text = trainrun("parse-log", log, "--pattern", r"it=(?P<step>\d+) obj=(?P<loss>\S+)").stdout
    assert "step 4  loss 4.2500" in text and "(custom format)" in text


def test_parse_log_refuses_an_unusable_pattern_naming_the_fix() -> None:
    result = trainrun("parse-log", JOBLOGS / "train_key_value.out", "--pattern", r"(?P<stp>\d+)")
    assert result.returncode == 2
    assert "the named groups it may have are step, epoch, loss" in result.stderr
