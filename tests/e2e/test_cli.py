"""The trainrun command as a person runs it: a subprocess, its exit code, its output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainrun.local.fixture import resolve_directories

from .conftest import EXAMPLES, ROOT, TRAINRUN, trainrun


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_validate_accepts_every_example(example: str) -> None:
    result = trainrun("validate", EXAMPLES / example)
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stdout


def test_validate_names_every_bad_field_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (EXAMPLES / "bert-large-phase1.yaml").read_text()
    bad.write_text(text.replace("nodes: 16", "nodes: 300").replace("trn1.32xlarge", "p5.48xlarge") + "\nextra: 1\n")
    result = trainrun("validate", bad)
    assert result.returncode == 2
    assert "capacity.nodes:" in result.stderr
    assert "capacity.instance_type:" in result.stderr
    assert "extra: is not a known field" in result.stderr


def test_validate_reports_the_five_commonest_mistakes_at_once_with_file_line_value_and_fix(tmp_path: Path) -> None:
    # Given a run file with a quoted number, an unquoted environment value, a mistyped key, a
    # mistyped instance type and a tab in an indentation
    bad = tmp_path / "five.yaml"
    text = (EXAMPLES / "single-node.yaml").read_text()
    text = (
        text.replace("nodes: 1", 'nodes: "1"')
        .replace("instance_type: trn1.32xlarge", "instance_type: TRN1.32XLARGE")
        .replace("  workdir: .", "  workdri: .")
        .replace("  total_steps: 40", "\ttotal_steps: 40")
        .replace("max_runtime: 30m", "max_runtime: 30m\n  env:\n    NEURON_RT_EXEC_TIMEOUT: 600")
    )
    bad.write_text(text)
    # When it is validated
    result = trainrun("validate", bad)
    # Then each is reported, in the order of the file, with its file:line, the value and the fix
    assert result.returncode == 2, result.stderr
    assert f"{bad} is not a valid run file (5 problems):" in result.stderr
    reported = [line for line in result.stderr.splitlines() if line.startswith(f"{bad}:")]
    assert reported == [
        f"{bad}:8: capacity.instance_type: 'TRN1.32XLARGE' is not a Trainium instance type; did you mean "
        "'trn1.32xlarge'? The Trainium types are trn1.2xlarge, trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge",
        f"{bad}:9: capacity.nodes: '1' is text, because of its quotes, not a whole number: remove the quotes "
        "(nodes: 1)",
        f"{bad}:24: workload.workdri: is not a known field; did you mean 'workdir'?",
        f"{bad}:28:1: indented with a tab; YAML indents with spaces only: replace the tab with spaces (read here "
        "as 2 columns, to check the rest of the file)",
        f"{bad}:31: workload.env.NEURON_RT_EXEC_TIMEOUT: 600 is read as a number, not text: quote it "
        '(NEURON_RT_EXEC_TIMEOUT: "600")',
    ]
    # And the tab's line is shown (the tab as the spaces a terminal shows), marked where the tab is
    assert "\n        total_steps: 40\n    ^\n" in result.stderr


def test_validate_shows_a_yaml_syntax_error_with_its_line_column_and_the_line_itself(tmp_path: Path) -> None:
    bad = tmp_path / "syntax.yaml"
    bad.write_text((EXAMPLES / "single-node.yaml").read_text().replace("nodes: 1", "nodes: 1: 2"))
    result = trainrun("validate", bad)
    assert result.returncode == 2, result.stderr
    assert result.stderr.endswith(
        f"{bad}:9:11: is not valid YAML: mapping values are not allowed here\n      nodes: 1: 2\n              ^\n"
    )
    assert "<byte string>" not in result.stderr


def test_validate_a_missing_file_exits_2() -> None:
    result = trainrun("validate", "no-such-run.yaml")
    assert result.returncode == 2
    assert "cannot read" in result.stderr


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    result = trainrun("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"trainrun {version('trainrun')}")


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_h_is_help_for_the_app_and_for_each_command(flag: str) -> None:
    for args in ([flag], ["validate", flag], ["local", flag]):
        result = trainrun(*args)
        assert result.returncode == 0, result.stderr
        assert "Usage: trainrun" in result.stdout


def test_validate_dash_reads_the_run_file_from_stdin() -> None:
    def validate_stdin(data: bytes) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*TRAINRUN, "validate", "-"], input=data, capture_output=True, cwd=ROOT, timeout=120, check=False
        )

    good = validate_stdin((EXAMPLES / "single-node.yaml").read_bytes())
    assert good.returncode == 0, good.stderr
    assert good.stdout.decode().startswith("<stdin> is valid: single-node")
    bad = validate_stdin((EXAMPLES / "single-node.yaml").read_bytes().replace(b"nodes: 1", b'nodes: "1"'))
    assert bad.returncode == 2
    assert "<stdin>:" in bad.stderr.decode() and "remove the quotes" in bad.stderr.decode()


# The summary a person reads (without --json) is tested in test_cli_terminal.py, on runs that
# prove more at once: a whole run costs some 25 CPU-seconds.
def test_local_keep_skips_teardown_and_lists_what_is_left() -> None:
    result = trainrun("local", EXAMPLES / "single-node.yaml", "--keep", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "SUCCEEDED"
    remaining = " ".join(summary["resources"]["remaining"])
    assert "vpc " in remaining and "file-system " in remaining and "instance " in remaining


def resumable_two_node_run(tmp_path: Path, **workload: object) -> Path:
    """The small example on two nodes, saying how to resume (workload.retries then defaults to 2)."""
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["capacity"]["nodes"] = 2
    document["workload"].update({"resume": "python3 train.py --steps 40", **workload})
    path = tmp_path / "resumable.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_local_node_failure_at_step_20_is_resubmitted_and_resumes_from_the_checkpoint(tmp_path: Path) -> None:
    # Given a two-node run that checkpoints every 20 steps and says how to resume
    # When a compute node goes down as step 20 is logged, and comes back a few seconds later
    result = trainrun("local", resumable_two_node_run(tmp_path), "--node-failure-at-step", "20", "--json")
    # Then the run succeeds, after two attempts of the train job
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "SUCCEEDED", summary["error"]
    train = summary["progress"]["train"]
    assert train["attempts"] == 2 and train["step"] == 40
    first, second = train["attempt_history"]
    assert first["state"] == "NODE_FAIL" and "a node of the job failed" in first["why"]
    assert first["first_step"] == 1 and first["last_step"] >= 20
    # And the second attempt resumed from a checkpoint of the first, not from step 1: step 20's, or
    # the one the job's first task writes on SIGTERM. Which step that is depends on how far apart
    # the two tasks are when the other node's task logs step 20 and takes its node down: one step
    # alone, more on a loaded machine (resumed at 19 has been seen). Which checkpoint it resumes
    # from is the stand-in workload's choice (examples/local-workload/train.py: the latest).
    assert 1 < second["first_step"] <= first["last_step"] + 1, (first, second)
    assert (second["last_step"], second["why"]) == (40, None)
    assert summary["states"].count("Train") == 2 and "Resume train" in summary["states"]
    # And nothing is left
    assert summary["resources"]["remaining"] == []


def test_local_node_failure_at_a_step_the_run_never_logs_exits_2(tmp_path: Path) -> None:
    run_file = resumable_two_node_run(tmp_path)
    for step, reason in (("0", "steps are numbered from 1"), ("41", "workload.total_steps: 40")):
        result = trainrun("local", run_file, "--node-failure-at-step", step)
        assert result.returncode == 2, result.stderr
        assert f"--node-failure-at-step: {step} " in result.stderr and reason in result.stderr


def test_local_rejects_a_run_the_reservation_cannot_hold_and_exits_3(tmp_path: Path) -> None:
    account = yaml.safe_load((EXAMPLES / "accounts" / "default.yaml").read_text())
    account["capacity_reservations"][0]["state"] = "expired"
    resolve_directories(account, EXAMPLES / "accounts")
    fixture = tmp_path / "account.yaml"
    fixture.write_text(yaml.safe_dump(account))
    result = trainrun("local", EXAMPLES / "single-node.yaml", "--account", fixture, "--json")
    assert result.returncode == 3, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "REJECTED"
    assert "CAPACITY_RESERVATION_NOT_ACTIVE" in {f["code"] for f in summary["findings"]}


def test_local_fail_at_a_state_exits_1_with_the_injected_error() -> None:
    # (a state's name in any case)
    result = trainrun("local", EXAMPLES / "single-node.yaml", "--fail-at", "validate CAPACITY", "--json")
    assert result.returncode == 1, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "FAILED"
    assert summary["error"]["error"] == "InjectedFailure"


def test_local_fail_at_an_unknown_state_exits_2_naming_the_states() -> None:
    result = trainrun("local", EXAMPLES / "single-node.yaml", "--fail-at", "Launch rockets")
    assert result.returncode == 2
    assert "Launch rockets" in result.stderr and "Validate capacity" in result.stderr


def test_local_fail_at_a_mistyped_state_exits_2_naming_the_task_state_meant() -> None:
    result = trainrun("local", EXAMPLES / "single-node.yaml", "--fail-at", "Trian")
    assert result.returncode == 2
    assert "--fail-at: 'Trian' is not a Task state of the run workflow (only a Task state can fail); " in result.stderr
    assert "did you mean 'Train'?" in result.stderr
    # Only the states that can fail are offered: no Choice, Wait or Pass state
    assert "Validate capacity" in result.stderr
    assert "Wait for cluster" not in result.stderr and "Cluster ready?" not in result.stderr


def test_local_fail_at_a_state_that_cannot_fail_exits_2() -> None:
    result = trainrun("local", EXAMPLES / "single-node.yaml", "--fail-at", "Wait for cluster")
    assert result.returncode == 2
    assert "'Wait for cluster' is not a Task state of the run workflow (only a Task state can fail)" in result.stderr


def test_local_refuses_an_invalid_run_file_before_importing_the_local_runtime(tmp_path: Path) -> None:
    # Given an invalid run file; when `trainrun local` runs on it (Python reporting every import)
    bad = tmp_path / "bad.yaml"
    bad.write_text((EXAMPLES / "single-node.yaml").read_text().replace("nodes: 1", 'nodes: "1"'))
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "trainrun", "local", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    # Then it exits 2 naming the problem, without having loaded the local stack (moto takes seconds)
    assert result.returncode == 2
    assert f"{bad}:9: capacity.nodes: '1' is text" in result.stderr
    imported = {line.rpartition("|")[2].strip() for line in result.stderr.splitlines() if line.startswith("import")}
    assert "trainrun.model.run_file" in imported
    assert "trainrun.local.runtime" not in imported and "moto" not in imported


def test_local_with_an_invalid_run_file_exits_2_before_starting_anything(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((EXAMPLES / "single-node.yaml").read_text().replace("nodes: 1", "nodes: 0"))
    result = trainrun("local", bad, "--json")
    assert result.returncode == 2
    assert "capacity.nodes:" in result.stderr
    assert "local AWS" not in result.stderr
    assert result.stdout == ""


def test_local_with_an_invalid_account_fixture_exits_2(tmp_path: Path) -> None:
    fixture = tmp_path / "account.yaml"
    fixture.write_text("region: us-west-2\ncapacity_reservations: [{id: nope}]\n")
    result = trainrun("local", EXAMPLES / "single-node.yaml", "--account", fixture)
    assert result.returncode == 2
    assert "capacity_reservations.0" in result.stderr


def test_parse_log_reports_what_a_job_printed_as_json() -> None:
    result = trainrun("parse-log", ROOT / "tests" / "fixtures" / "joblogs" / "train_bert_ok.out", "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert {"compile", "train", "checkpoints", "end", "failures", "lines", "unparsed_lines"} <= set(found)
    assert found["end"]["job"] == "train" and found["end"]["exit_code"] == 0


def test_cluster_config_prints_the_parallelcluster_configuration() -> None:
    result = trainrun("cluster-config", EXAMPLES / "bert-large-phase1.yaml")
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    (queue,) = config["Scheduling"]["SlurmQueues"]
    (compute,) = queue["ComputeResources"]
    assert compute["MinCount"] == compute["MaxCount"] == 16
    assert compute["CapacityReservationTarget"] == {"CapacityReservationId": "cr-0123456789abcdef0"}


def test_cluster_config_of_an_invalid_run_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: Bad Name\n")
    result = trainrun("cluster-config", bad)
    assert result.returncode == 2
    assert "name:" in result.stderr


def test_validate_puts_an_unclosed_quote_where_it_opens_not_where_yaml_gave_up(tmp_path: Path) -> None:
    # Given a run file whose compile command's quote is never closed (the next quote is a line down)
    text = (EXAMPLES / "single-node.yaml").read_text()
    lines = text.splitlines()
    number = next(n for n, line in enumerate(lines, 1) if line.startswith("  compile: "))
    text = text.replace("  compile: neuron", '  compile: "neuron').replace("  train: python3", '  train: "python3', 1)
    run_file = tmp_path / "run.yaml"
    run_file.write_text(text)
    # When it is validated
    result = trainrun("validate", run_file)
    # Then the problem is on the line and column where the quote opens
    assert result.returncode == 2
    assert f'{run_file}:{number}:12: is not valid YAML: the " opened here is not closed on its line' in result.stderr


def test_validate_reports_a_missing_source_directory_with_the_other_problems_at_its_line(tmp_path: Path) -> None:
    # Given a run file with a bad node count and a workload directory that does not exist
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["capacity"]["nodes"] = 0
    document["workload"]["source"] = {"path": "./nowhere"}
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump(document, sort_keys=False))
    line = next(n for n, text in enumerate(run_file.read_text().splitlines(), 1) if "path: ./nowhere" in text)
    # When it is validated
    result = trainrun("validate", run_file)
    # Then both are reported, each as file:line
    assert result.returncode == 2
    assert f"{run_file} is not a valid run file (2 problems):" in result.stderr
    assert f"{run_file}:{line}: workload.source.path: {tmp_path / 'nowhere'} does not exist" in result.stderr
    assert "capacity.nodes: 0 is too small" in result.stderr
