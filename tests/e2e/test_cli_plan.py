"""`trainrun plan` as a person runs it: a subprocess, offline, its exit code and its output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from .conftest import EXAMPLES, trainrun


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_plan_prints_resources_commands_and_cost_for_every_example(example: str) -> None:
    result = trainrun("plan", EXAMPLES / example)
    assert result.returncode == 0, result.stderr
    assert "Resources" in result.stdout
    if yaml.safe_load((EXAMPLES / example).read_text()).get("cluster", {}).get("kind") == "eks":
        # No head node and no Slurm: the node group and the launch template instead
        assert "node-group" in result.stdout and "EFA interfaces" in result.stdout
    else:
        assert "sbatch --parsable --exclusive --no-requeue --nodes=" in result.stdout
        assert "srun --label bash -c " in result.stdout
    assert "total per hour" in result.stdout


def test_plan_json_is_one_document_with_the_cost_and_the_full_scripts() -> None:
    result = trainrun("plan", EXAMPLES / "bert-large-phase1.yaml", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert (plan["name"], plan["nodes"], plan["instance_type"], plan["region"]) == (
        "bert-large-phase1",
        16,
        "trn1.32xlarge",
        "us-west-2",
    )
    assert plan["cost"]["per_hour"] > 16 * 20
    assert plan["cost"]["partial"] is False
    assert plan["cluster_config"]["Scheduling"]["SlurmQueues"][0]["ComputeResources"][0]["MinCount"] == 16
    train = plan["head_node_commands"][-1]
    assert train["state"] == "Train"
    assert "\nsbatch_command=(sbatch --parsable --exclusive --no-requeue --nodes=16 " in train["script"]


def test_plan_of_an_invalid_run_file_names_every_problem_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (EXAMPLES / "bert-large-phase1.yaml").read_text()
    bad.write_text(text.replace("nodes: 16", "nodes: 300").replace("trn1.32xlarge", "p5.48xlarge"))
    result = trainrun("plan", bad, "--json")
    assert result.returncode == 2
    assert "capacity.nodes:" in result.stderr
    assert "capacity.instance_type:" in result.stderr
    assert result.stdout == ""


def test_plan_with_a_bad_neuron_install_script_exits_2() -> None:
    result = trainrun("plan", EXAMPLES / "bert-large-phase1.yaml", "--neuron-install-script", "ftp://x/y.sh")
    assert result.returncode == 2
    assert "neuron_install_script_uri" in result.stderr


def test_plan_text_writes_money_and_counts_as_a_person_would() -> None:
    single = trainrun("plan", EXAMPLES / "single-node.yaml").stdout
    bert = trainrun("plan", EXAMPLES / "bert-large-phase1.yaml").stdout
    # One node is one node; sixteen are plural
    assert "sbatch the train job on its one node" in single and "1 x trn1.32xlarge static node (" in single
    assert "over all 1 nodes" not in single and "1 instances" not in single
    assert "sbatch the train job over all 16 nodes" in bert and "16 instances" in bert
    # Money in dollars and cents; what is less than a cent to two significant digits
    cost_table = bert[bert.index("Cost estimate") : bert.index("Notes")]
    amounts = re.findall(r"\$[\d,]+\.\d+", cost_table)
    assert "$21.50" in amounts and "$0.68" in amounts and "$0.00029" in amounts and "$8,281.68" in amounts
    # none with a single decimal ($21.5) or with six or more ($0.000287671)
    assert not [amount for amount in amounts if len(amount.rsplit(".", 1)[1]) == 1 or len(amount.rsplit(".")[1]) > 5]


def test_plan_shows_the_timeline_and_draws_it_with_png(tmp_path: Path) -> None:
    # When plan is asked for the BERT example's timeline as a picture too
    png = tmp_path / "timeline.png"
    result = trainrun("plan", EXAMPLES / "bert-large-phase1.yaml", "--png", png)
    # Then the text has the predicted figures and the chart, labelled as the AWS clock model
    assert result.returncode == 0, result.stderr
    timeline = result.stdout[result.stdout.index("Timeline (a model: the AWS clock") :]
    assert re.search(r"time to first training step: \d+ min \(all in sequence: (1 h )?\d+ min\)", timeline)
    assert re.search(r"idle node-minutes: +[\d,]+ \(\$[\d,]+; all in sequence", timeline)
    assert "Compute nodes billed" in timeline and "░" in timeline
    # And the PNG is written
    assert png.read_bytes()[:4] == b"\x89PNG" and f"Timeline drawn: {png}" in result.stderr


def test_plan_png_into_a_missing_directory_exits_2_naming_the_file(tmp_path: Path) -> None:
    png = tmp_path / "no-such-directory" / "timeline.png"
    result = trainrun("plan", EXAMPLES / "single-node.yaml", "--png", png)
    assert result.returncode == 2
    assert f"--png: cannot write {png}" in result.stderr


def test_plan_says_durations_counts_and_two_nodes_in_words(tmp_path: Path) -> None:
    # Given a two-node run with one resubmission allowed and a budget that pays for minutes
    text = (EXAMPLES / "single-node.yaml").read_text().replace("nodes: 1", "nodes: 2")
    text = text.replace("workload:\n", "workload:\n  retries: 1\n", 1) + "budget:\n  max_cost_usd: 1\n"
    run_file = tmp_path / "two-nodes.yaml"
    run_file.write_text(text)
    # When it is planned
    result = trainrun("plan", run_file)
    # Then the words are proper: no "0.0 h", no "all 2 nodes", no "(s)"
    assert result.returncode == 0, result.stderr
    assert "over both nodes" in result.stdout and "all 2 nodes" not in result.stdout
    assert "up to 1 resubmission," in result.stdout and "(s)" not in result.stdout
    assert re.search(r"pays for (about \d+ minutes?|less than a minute) of the run", result.stdout), result.stdout
    assert "0.0 h" not in result.stdout
