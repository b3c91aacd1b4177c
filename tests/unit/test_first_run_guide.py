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


def test_the_readme_says_how_to_find_the_config_bucket_it_uploads_to() -> None:
    # Given the README's upload into <ConfigBucketName>
    text = (ROOT / "README.md").read_text()
    assert "<ConfigBucketName>" in upload()[4]
    # Then it says where that name comes from, and the command that needs no name
    assert "OutputKey=='ConfigBucketName'" in text
    assert "trainrun submit examples/bert-large-phase1.yaml" in text


def test_deploying_md_tells_of_the_compile_cache_and_how_to_attach_the_deployer_policies() -> None:
    from trainrun.logic.compile_cache import CACHE_PREFIX

    text = (ROOT / "docs" / "deploying.md").read_text()
    assert "no shared cache" not in text and f"/{CACHE_PREFIX}/<instance type>/" in text
    assert "aws iam create-policy" in text and "file://build/deployer/deployer-$n.json" in text
    assert "object_versions.delete()" in text
