"""The run file's `cluster.kind` and `cluster.eks`: an EKS cluster behind the same run file."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.logic.eks_versions import DEFAULT_KUBERNETES_VERSION, SUPPORTED_KUBERNETES_VERSIONS
from trainrun.logic.neuron_install import NEURON_VERSIONS
from trainrun.model.run_file import NEURON_TRAINING_IMAGE, PARALLELCLUSTER_ONLY_FIELDS, RunSpec, parse_run_file

from .test_runfile import assert_problem, problems_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EKS_EXAMPLE = EXAMPLES / "bert-large-phase1-eks.yaml"
PARALLELCLUSTER_EXAMPLE = EXAMPLES / "bert-large-phase1.yaml"
# A value a run file may give each ParallelCluster-only field.
PARALLELCLUSTER_VALUES = {
    "os": "ubuntu2204",
    "head_node_instance_type": "c5.4xlarge",
    "custom_ami": "ami-0123456789abcdef0",
    "reuse": "bert-phase1",
}


def eks_document(**eks: Any) -> dict[str, Any]:
    """The smallest EKS run file, with `eks` as its cluster.eks section when given."""
    document: dict[str, Any] = {
        "name": "bert-phase1",
        "region": "us-west-2",
        "capacity": {"reservation_id": "cr-0123456789abcdef0", "instance_type": "trn1.32xlarge", "nodes": 16},
        "cluster": {"kind": "eks"},
        "workload": {"source": {"git": "https://github.com/aws-neuron/aws-neuron-samples.git"}, "train": "./train.sh"},
    }
    if eks:
        document["cluster"]["eks"] = eks
    return document


def parse(document: dict[str, Any]) -> RunSpec:
    return parse_run_file(yaml.safe_dump(document, sort_keys=False))


# --- the kind -------------------------------------------------------------------------------


def test_a_run_file_without_a_kind_is_a_parallelcluster_run_as_before() -> None:
    spec = parse_run_file(PARALLELCLUSTER_EXAMPLE.read_bytes())
    assert spec.cluster.kind == "parallelcluster"
    assert spec.cluster.eks is None
    assert (spec.cluster.os, spec.cluster.head_node_instance_type) == ("ubuntu2204", "c5.4xlarge")


def test_an_eks_run_without_an_eks_section_gets_the_defaults() -> None:
    spec = parse(eks_document())
    eks = spec.cluster.eks_settings
    assert spec.cluster.kind == "eks"
    assert eks.kubernetes_version == DEFAULT_KUBERNETES_VERSION
    assert eks.image == NEURON_TRAINING_IMAGE
    # CreateCluster's own defaults
    assert (eks.endpoint_public_access, eks.endpoint_private_access) == (True, False)


def test_a_mistyped_kind_is_refused_with_the_kind_it_was_likely_meant_to_be() -> None:
    document = eks_document()
    document["cluster"]["kind"] = "EKS"
    assert_problem(problems_of(document), "cluster.kind", "did you mean 'eks'?")


@pytest.mark.parametrize("field", sorted(PARALLELCLUSTER_ONLY_FIELDS))
def test_a_parallelcluster_field_on_eks_is_refused_with_its_value_why_and_the_fix(field: str) -> None:
    document = eks_document()
    document["cluster"][field] = PARALLELCLUSTER_VALUES[field]
    problems = problems_of(document)
    [problem] = problems
    assert problem.path == f"cluster.{field}"
    assert problem.line is not None
    assert problem.message.startswith(repr(PARALLELCLUSTER_VALUES[field]))
    assert problem.message.endswith("remove it (or set cluster.kind: parallelcluster)")


def test_every_parallelcluster_field_given_on_eks_is_refused_at_once() -> None:
    document = eks_document()
    document["cluster"].update(PARALLELCLUSTER_VALUES)
    assert {problem.path for problem in problems_of(document)} == {
        f"cluster.{field}" for field in PARALLELCLUSTER_VALUES
    }


def test_the_os_of_an_eks_run_is_refused_even_one_parallelcluster_needs_an_ami_for() -> None:
    # rocky8 without custom_ami is a ParallelCluster problem; on EKS the one problem is the os itself
    document = eks_document()
    document["cluster"]["os"] = "rocky8"
    [problem] = problems_of(document)
    assert problem.path == "cluster.os"
    assert "AL2023_x86_64_NEURON" in problem.message


def test_an_eks_section_on_a_parallelcluster_run_is_refused_with_the_fix() -> None:
    document = eks_document(kubernetes_version=DEFAULT_KUBERNETES_VERSION)
    del document["cluster"]["kind"]
    assert_problem(problems_of(document), "cluster.eks", "set cluster.kind: eks, or remove cluster.eks")


# --- cluster.eks ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES_VERSIONS)
def test_every_version_eks_creates_is_accepted(version: str) -> None:
    assert parse(eks_document(kubernetes_version=version)).cluster.eks_settings.kubernetes_version == version


def test_an_unquoted_version_is_a_number_and_the_fix_quotes_it() -> None:
    text = yaml.safe_dump(eks_document(kubernetes_version="VERSION"), sort_keys=False)
    text = text.replace("VERSION", DEFAULT_KUBERNETES_VERSION)
    assert isinstance(yaml.safe_load(text)["cluster"]["eks"]["kubernetes_version"], float)
    assert_problem(
        problems_of(text),
        "cluster.eks.kubernetes_version",
        f'is read as a number, not text: quote it (kubernetes_version: "{DEFAULT_KUBERNETES_VERSION}")',
    )


@pytest.mark.parametrize(
    ("version", "fragment"),
    [
        ("1.20", "is past the end of its Amazon EKS extended support"),
        ("1.99", "is newer than the EKS versions this trainrun knows"),
        ("v1.35", "is not a Kubernetes minor version Amazon EKS offers"),
        ("1.035", "is not a Kubernetes minor version Amazon EKS offers"),
    ],
)
def test_a_version_eks_does_not_create_is_refused_with_why_and_the_versions_it_does(
    version: str, fragment: str
) -> None:
    problems = problems_of(eks_document(kubernetes_version=version))
    assert_problem(problems, "cluster.eks.kubernetes_version", f"{version!r} {fragment}")
    assert_problem(problems, "cluster.eks.kubernetes_version", f"use one of {', '.join(SUPPORTED_KUBERNETES_VERSIONS)}")


def test_an_api_reachable_from_nowhere_is_refused_naming_both_fields() -> None:
    problems = problems_of(eks_document(endpoint_public_access=False, endpoint_private_access=False))
    assert_problem(problems, "cluster.eks", "endpoint_public_access and endpoint_private_access are both false")
    assert_problem(problems, "cluster.eks", "endpoint_private_access: true")


def test_a_private_api_only_is_refused_trainruns_functions_reach_the_public_one() -> None:
    problems = problems_of(eks_document(endpoint_public_access=False, endpoint_private_access=True))
    assert_problem(problems, "cluster.eks", "endpoint_public_access is false")
    assert_problem(problems, "cluster.eks", "set endpoint_public_access: true")


def test_both_endpoints_are_accepted() -> None:
    eks = parse(eks_document(endpoint_public_access=True, endpoint_private_access=True)).cluster.eks_settings
    assert (eks.endpoint_public_access, eks.endpoint_private_access) == (True, True)


@pytest.mark.parametrize(
    "image",
    [
        "123456789012.dkr.ecr.us-west-2.amazonaws.com/bert-neuron:1.0",
        "registry.example.com:5000/team/bert/trainer:2026-11-01_a",
        "public.ecr.aws/neuron/pytorch-training-neuronx@sha256:" + "0" * 64,
    ],
)
def test_an_image_with_its_registry_and_a_tag_or_digest_is_accepted(image: str) -> None:
    assert parse(eks_document(image=image)).cluster.eks_settings.image == image


@pytest.mark.parametrize(
    "image",
    [
        "ubuntu:22.04",  # Docker Hub by implication
        "public.ecr.aws/neuron/pytorch-training-neuronx",  # no tag: whatever `latest` is that day
        "public.ecr.aws/neuron/pytorch-training-neuronx:latest; rm -rf /",
        "Public.ECR.aws/neuron/x:1",
    ],
)
def test_an_image_without_its_registry_or_version_is_refused_with_an_example(image: str) -> None:
    assert_problem(
        problems_of(eks_document(image=image)),
        "cluster.eks.image",
        "is not a container image with its registry, repository and a tag or @sha256: digest, e.g. public.ecr.aws/",
    )


def test_an_unknown_eks_field_is_refused_with_the_field_it_was_likely_meant_to_be() -> None:
    assert_problem(
        problems_of(eks_document(kubernetes_verison="1.35")), "cluster.eks.kubernetes_verison", "did you mean"
    )


def test_the_default_image_is_the_neuron_training_container_of_the_pinned_release() -> None:
    # The Neuron DLC tag reads <PyTorch>-neuronx-py<Python>-sdk<Neuron release>-<OS>: moving
    # NEURON_VERSIONS without the image would give EKS runs another Neuron than ParallelCluster runs.
    repository, tag = NEURON_TRAINING_IMAGE.split(":")
    torch = ".".join(NEURON_VERSIONS["torch_neuronx"].split(".")[:3])
    assert repository == "public.ecr.aws/neuron/pytorch-training-neuronx"
    assert tag.startswith(f"{torch}-neuronx-py")
    assert f"-sdk{NEURON_VERSIONS['neuron_release']}-" in tag


# --- the run record ---------------------------------------------------------------------------


def test_an_eks_spec_is_stored_with_only_what_its_run_file_gives_and_reads_back_the_same() -> None:
    spec = parse(eks_document(kubernetes_version=SUPPORTED_KUBERNETES_VERSIONS[-1]))
    stored = spec.stored()
    assert stored["cluster"] == {"kind": "eks", "eks": {"kubernetes_version": SUPPORTED_KUBERNETES_VERSIONS[-1]}}
    assert RunSpec.model_validate(stored) == spec


def test_an_eks_spec_without_an_eks_section_is_stored_as_its_kind() -> None:
    spec = parse(eks_document())
    assert spec.stored()["cluster"] == {"kind": "eks"}
    assert RunSpec.model_validate(spec.stored()) == spec


# --- the example ------------------------------------------------------------------------------


def test_the_eks_example_validates_as_an_eks_run() -> None:
    spec = parse_run_file(EKS_EXAMPLE.read_bytes())
    assert spec.cluster.kind == "eks"
    assert spec.cluster.eks_settings.kubernetes_version in SUPPORTED_KUBERNETES_VERSIONS


def test_the_eks_example_is_the_parallelcluster_one_on_eks() -> None:
    # The same capacity, network, file system, dataset, environment, limit and teardown; only the
    # cluster (and the commands, which run in the image rather than a virtual environment) differ.
    eks = parse_run_file(EKS_EXAMPLE.read_bytes())
    parallelcluster = parse_run_file(PARALLELCLUSTER_EXAMPLE.read_bytes())
    for section in ("region", "capacity", "network", "storage", "teardown", "notify", "budget"):
        assert getattr(eks, section) == getattr(parallelcluster, section), section
    same = ("source", "workdir", "dataset", "env", "max_runtime")
    assert {field: getattr(eks.workload, field) for field in same} == {
        field: getattr(parallelcluster.workload, field) for field in same
    }
    assert parallelcluster.workload.train.split("&& ")[-1] == eks.workload.train.split("&& ")[-1]


def test_the_eks_example_names_no_parallelcluster_field() -> None:
    document = yaml.safe_load(EKS_EXAMPLE.read_text())
    assert not set(document["cluster"]) & set(PARALLELCLUSTER_ONLY_FIELDS)
    # and its own cluster section, put on a ParallelCluster run, is refused
    refused = copy.deepcopy(document)
    refused["cluster"]["kind"] = "parallelcluster"
    assert_problem(problems_of(refused), "cluster.eks", "cluster.kind is parallelcluster")
