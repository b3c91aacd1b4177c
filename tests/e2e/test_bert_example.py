"""examples/bert-large-phase1.yaml rehearsed offline, as its header promises: the account fixture
stands in for its git source (aws-neuron-samples, cloned from a local repository through git's
url.<base>.insteadOf) and its dataset (a tiny .tar in the example's bucket), and the stand-in
training script asserts what the real one asserts (the PyTorch Neuron environment active, the
dataset under ~/examples_datasets)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, trainrun

pytestmark = NEEDS_LOCAL_HEAD_NODE

BERT = EXAMPLES / "bert-large-phase1.yaml"


def test_the_bert_example_runs_offline_to_success() -> None:
    result = trainrun("local", BERT, "--json", timeout=600)

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "SUCCEEDED", summary["error"]
    # The stand-in script logged from the first of the 16 nodes, through the dataset link
    assert summary["progress"]["train"]["step"] == 40
    assert summary["resources"]["remaining"] == []


def test_without_the_dataset_link_the_training_script_finds_no_data_as_on_aws(tmp_path: Path) -> None:
    # Given the example whose setup does not link ~/examples_datasets to the dataset on /fsx
    # (on two of its nodes: the failure is the script's, whatever their number)
    document = yaml.safe_load(BERT.read_text())
    document["capacity"]["nodes"] = 2
    setup = document["workload"]["setup"]
    document["workload"]["setup"] = setup.replace(" && ln -sfn /fsx/examples_datasets ~/examples_datasets", "")
    assert document["workload"]["setup"] != setup
    run_file = tmp_path / "bert-no-link.yaml"
    run_file.write_text(yaml.safe_dump(document))

    result = trainrun("local", run_file, "--json", timeout=600)

    # Then the compile job fails with the real script's assertion
    assert result.returncode == 1
    summary = json.loads(result.stdout)
    assert summary["status"] == "FAILED"
    assert "Data directory ~/examples_datasets/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128/ doesn't exist" in (
        json.dumps(summary["error"])
    )
