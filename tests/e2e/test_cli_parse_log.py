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
