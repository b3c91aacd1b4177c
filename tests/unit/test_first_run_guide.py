"""README.md's first real run agrees with the example it runs: the dataset copied where the run
file reads it, and every bucket the run file names passed to the stack (RunBucketArns)."""

from __future__ import annotations

from tests.first_run import ROOT, command, deploy_parameters, upload
from trainrun.logic.allowlists import RunAllowLists, check_allowed
from trainrun.model.run_file import parse_run_file


def test_the_readme_copies_the_dataset_where_the_example_reads_it() -> None:
    # Given the README's copy of the AWS Neuron tutorial's dataset into the user's bucket
    copy = command(
        "aws",
        "s3",
        "cp",
        naming="s3://neuron-s3/training_datasets/bert_pretrain_wikicorpus_tokenized_hdf5/"
        "bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128.tar",
    )
    # Then it lands where the run file it uploads stages its dataset from
    spec = parse_run_file((ROOT / upload()[3]).read_bytes())
    assert spec.workload.dataset is not None and copy[4] == spec.workload.dataset.source


def test_the_readmes_deploy_lets_runs_use_every_bucket_of_the_example() -> None:
    # Given the stack deployed as the README deploys it, and the run file it uploads
    allowed = RunAllowLists.from_parameters(
        config_bucket="trainrun-configbucket-0a1b2c3d", bucket_arns=deploy_parameters()["RunBucketArns"], topic_arns=""
    )
    spec = parse_run_file((ROOT / upload()[3]).read_bytes())
    # Then Load run spec's check finds nothing to refuse
    assert check_allowed(spec, allowed) == []
