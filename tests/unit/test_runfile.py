"""The run file: every field rule, one behaviour per test."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.errors import Problem, RunSpecInvalid
from trainrun.logic.neuron_install import supported_os
from trainrun.model.run_file import (
    MAX_RUN_FILE_BYTES,
    PCLUSTER_OSES,
    TRAINIUM_INSTANCE_TYPES,
    RunSpec,
    duration_seconds,
    parse_run_file,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# Every YAML file directly in examples/ is a run file (account fixtures live in examples/accounts/).
RUN_FILE_EXAMPLES = sorted(EXAMPLES.glob("*.yaml"))
GROUP_ARN = "arn:aws:resource-groups:us-west-2:123456789012:group/trn1-odcrs"


def valid_document() -> dict[str, Any]:
    """The smallest run file that is valid, as the YAML loader would return it."""
    return {
        "name": "bert-phase1",
        "region": "us-west-2",
        "capacity": {
            "reservation_id": "cr-0123456789abcdef0",
            "instance_type": "trn1.32xlarge",
            "nodes": 16,
            "availability_zone": "us-west-2d",
        },
        "workload": {
            "source": {"git": "https://github.com/aws-neuron/aws-neuron-samples.git", "ref": "master"},
            "train": "./train.sh",
        },
    }


def with_value(path: str, value: Any, document: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of `document` (default: the valid one) with the dotted `path` set to `value`."""
    document = copy.deepcopy(document if document is not None else valid_document())
    *parents, last = path.split(".")
    node = document
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return document


def without(path: str, document: dict[str, Any] | None = None) -> dict[str, Any]:
    document = copy.deepcopy(document if document is not None else valid_document())
    *parents, last = path.split(".")
    node = document
    for part in parents:
        node = node[part]
    del node[last]
    return document


def parse(document: dict[str, Any]) -> RunSpec:
    return parse_run_file(yaml.safe_dump(document, sort_keys=False))


def problems_of(document: dict[str, Any] | str) -> list[Problem]:
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    with pytest.raises(RunSpecInvalid) as caught:
        parse_run_file(text)
    return caught.value.problems


def assert_problem(problems: list[Problem], path: str, fragment: str) -> None:
    """A problem names `path`, and its message says `fragment`."""
    at_path = [problem.message for problem in problems if problem.path == path]
    assert at_path, f"no problem at {path}: {problems}"
    assert any(fragment in message for message in at_path), f"{fragment!r} not in {at_path}"


# --- the whole document ---------------------------------------------------------------------


def test_the_smallest_valid_document_parses_with_defaults():
    # Given the smallest valid run file
    # When it is parsed
    spec = parse(valid_document())
    # Then the defaults fill in the rest
    assert spec.network.cidr == "10.0.0.0/16"
    assert spec.storage.fsx.effective_deployment_type == "PERSISTENT_2"
    assert spec.storage.fsx.effective_storage_capacity_gib == 1200
    assert spec.storage.fsx.effective_throughput_per_tib == 250
    assert spec.cluster.os == "ubuntu2204"
    assert spec.workload.workdir == "."
    assert spec.workload.max_runtime_seconds == 24 * 3600
    assert spec.teardown.on_success == spec.teardown.on_failure == "delete"


def test_the_model_is_frozen():
    spec = parse(valid_document())
    with pytest.raises(ValueError, match="frozen"):
        spec.name = "other"


@pytest.mark.parametrize("example", RUN_FILE_EXAMPLES, ids=lambda path: path.name)
def test_every_example_is_a_valid_run_file(example: Path):
    # Given an example shipped with the project
    # When it is parsed
    spec = parse_run_file(example.read_text())
    # Then it is valid
    assert isinstance(spec, RunSpec)


def test_the_examples_include_the_bert_and_single_node_runs():
    assert {"bert-large-phase1.yaml", "single-node.yaml"} <= {path.name for path in RUN_FILE_EXAMPLES}


def test_the_bert_example_is_the_neuron_tutorials_phase1_job():
    spec = parse_run_file((EXAMPLES / "bert-large-phase1.yaml").read_text())
    assert (spec.capacity.instance_type, spec.capacity.nodes) == ("trn1.32xlarge", 16)
    assert spec.storage.fsx.data_repository is not None
    # Every shell field runs in the PyTorch Neuron environment the nodes get (nothing activates it)
    activate = ". ~/aws_neuron_venv_pytorch/bin/activate && "
    run_script = "./run_dp_bert_large_hf_pretrain_bf16_s128_lamb.sh"
    assert spec.workload.compile == f"{activate}neuron_parallel_compile {run_script}"
    assert spec.workload.train == f"{activate}{run_script}"
    assert spec.workload.setup is not None and spec.workload.setup.startswith(activate)
    # The training script reads ~/examples_datasets/<dataset>: setup links it to where the dataset is staged
    assert spec.workload.dataset is not None and spec.workload.dataset.path == "/fsx/examples_datasets"
    assert spec.workload.setup.endswith("ln -sfn /fsx/examples_datasets ~/examples_datasets")
    assert spec.workload.env == {"NEURON_RT_EXEC_TIMEOUT": "600"}


def test_all_problems_are_reported_at_once():
    # Given a run file with several unrelated mistakes
    document = valid_document()
    document["name"] = "Bad Name"
    document["capacity"]["nodes"] = 0
    document["capacity"]["instance_type"] = "p4d.24xlarge"
    document["cluster"] = {"os": "alinux2"}
    document["workload"]["max_runtime"] = "forever"
    document["teardown"] = {"on_success": "maybe"}
    # When it is parsed
    problems = problems_of(document)
    # Then every one of them is reported, each by its path
    assert {path for path, *_ in problems} == {
        "name",
        "capacity.nodes",
        "capacity.instance_type",
        "cluster.os",
        "workload.max_runtime",
        "teardown.on_success",
    }


def test_a_cross_field_check_is_reported_alongside_other_problems():
    # Given a zone outside the region and, elsewhere, a bad workdir
    document = with_value("capacity.availability_zone", "us-east-1a")
    document["workload"]["workdir"] = "/abs"
    # Then both are reported
    problems = problems_of(document)
    assert_problem(problems, "capacity.availability_zone", "is not in region us-west-2")
    assert_problem(problems, "workload.workdir", "is not a path inside the workload")


def test_the_error_message_lists_every_problem_with_its_path_and_line():
    with pytest.raises(RunSpecInvalid) as caught:
        parse(with_value("name", "X", with_value("capacity.nodes", 0)))
    # (the Lambda's error and the run's findings say it so: the run file is not at hand there)
    assert "name (line 1): 'X' is not a run name" in str(caught.value)
    assert "capacity.nodes (line 6): 0 is too small" in str(caught.value)


@pytest.mark.parametrize("field", ["name", "capacity", "workload"])
def test_a_required_field_must_be_present(field: str):
    assert_problem(problems_of(without(field)), field, "is required")


@pytest.mark.parametrize("field", ["capacity.instance_type", "capacity.nodes", "workload.source", "workload.train"])
def test_a_required_nested_field_must_be_present(field: str):
    assert_problem(problems_of(without(field)), field, "is required")


# --- the file itself ------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text\n", "42\n", "", "null\n"])
def test_a_document_that_is_not_a_mapping_is_rejected(text: str):
    assert_problem(problems_of(text), "(file)", "must be a YAML mapping")


@pytest.mark.parametrize("text", ["name: [unclosed\n", "a: b: c\n", "--- a\n--- b\n"])
def test_invalid_yaml_is_rejected(text: str):
    assert_problem(problems_of(text), "(file)", "is not valid YAML")


def test_a_duplicate_key_is_rejected():
    text = "name: first\nname: second\n"
    assert_problem(problems_of(text), "(file)", "duplicate key 'name'")


def test_a_duplicate_nested_key_is_rejected():
    text = yaml.safe_dump(valid_document()) + "teardown:\n  on_success: keep\n  on_success: delete\n"
    assert_problem(problems_of(text), "(file)", "duplicate key 'on_success'")


def test_a_collection_as_a_key_is_rejected():
    assert_problem(problems_of("? [a, b]\n: 1\n"), "(file)", "a key must be a plain value")


def test_deep_nesting_is_rejected():
    assert_problem(problems_of("[" * 100_000), "(file)", "nested too deeply")


def test_an_oversize_file_is_rejected():
    text = yaml.safe_dump(valid_document()) + "#" * MAX_RUN_FILE_BYTES
    assert_problem(problems_of(text), "(file)", f"a run file is at most {MAX_RUN_FILE_BYTES}")


def test_the_size_limit_counts_bytes_not_characters():
    # Given text under the limit in characters but over it in UTF-8 bytes
    text = "# " + "é" * (MAX_RUN_FILE_BYTES // 2 + 1)
    assert len(text) < MAX_RUN_FILE_BYTES
    assert_problem(problems_of(text), "(file)", "bytes")


def test_bytes_are_accepted_as_input():
    assert parse_run_file(yaml.safe_dump(valid_document()).encode()).name == "bert-phase1"


@pytest.mark.parametrize(
    "path",
    [
        "foo",
        "capacity.foo",
        "network.foo",
        "storage.foo",
        "storage.fsx.foo",
        "cluster.foo",
        "workload.foo",
        "workload.source.foo",
        "workload.dataset.foo",
        "teardown.foo",
    ],
)
def test_an_unknown_key_is_rejected_at_every_level_with_its_path(path: str):
    # Given an otherwise valid document with an unknown key at `path`
    document = with_value(path, "x")
    if path.startswith("workload.dataset."):
        document["workload"]["dataset"].update(source="s3://bucket/data.tar", path="/fsx/data")
    # Then the problem names that key
    assert_problem(problems_of(document), path, "is not a known field")


# --- name and region ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "bert-phase1", "x" + "9" * 39, "run-2024-01"])
def test_a_run_name_of_lowercase_letters_digits_and_dashes_is_accepted(name: str):
    assert parse(with_value("name", name)).name == name


@pytest.mark.parametrize(
    "name", ["", "Bert", "1run", "-run", "run_1", "run.1", "run 1", "run;rm", "a$(id)", "rün", "run\n"]
)
def test_a_run_name_outside_the_pattern_is_rejected(name: str):
    assert_problem(
        problems_of(with_value("name", name)), "name", "is not a run name: lower-case letters, digits and dashes"
    )


def test_a_run_name_longer_than_40_is_rejected():
    assert_problem(problems_of(with_value("name", "x" * 41)), "name", "is 41 characters; at most 40")


@pytest.mark.parametrize(
    ("name", "fragment"),
    [(42, 'is read as a number, not text: quote it (name: "42")'), (None, "has no value"), (["a"], "is not text")],
)
def test_a_run_name_must_be_a_string(name: Any, fragment: str):
    assert_problem(problems_of(with_value("name", name)), "name", fragment)


@pytest.mark.parametrize("region", ["us-west-2", "eu-central-1", "us-gov-west-1", "ap-southeast-4"])
def test_a_region_is_accepted(region: str):
    document = with_value("region", region)
    del document["capacity"]["availability_zone"]
    assert parse(document).region == region


@pytest.mark.parametrize("region", ["US-WEST-2", "us-west", "uswest2", "us-west-2a", "us-west-2 ", "us-west-22"])
def test_a_bad_region_is_rejected(region: str):
    assert_problem(
        problems_of(with_value("region", region)), "region", f"{region!r} is not an AWS region, e.g. us-west-2"
    )


def test_the_region_is_optional():
    assert parse(without("region")).region is None


# --- capacity -------------------------------------------------------------------------------


def test_a_reservation_group_arn_may_replace_the_reservation_id():
    document = with_value("capacity.reservation_group_arn", GROUP_ARN, without("capacity.reservation_id"))
    assert parse(document).capacity.reservation_group_arn == GROUP_ARN


def test_both_reservation_id_and_group_arn_are_rejected():
    problems = problems_of(with_value("capacity.reservation_group_arn", GROUP_ARN))
    assert_problem(problems, "capacity", "exactly one of reservation_id or reservation_group_arn")


def test_neither_reservation_id_nor_group_arn_is_rejected():
    problems = problems_of(without("capacity.reservation_id"))
    assert_problem(problems, "capacity", "exactly one of reservation_id or reservation_group_arn")


@pytest.mark.parametrize(
    "value",
    ["cr-0123456789abcdef", "cr-0123456789abcdef01", "cr-0123456789ABCDEF0", "odcr-0123456789abcdef0", "cr-"],
)
def test_a_bad_reservation_id_is_rejected(value: str):
    assert_problem(
        problems_of(with_value("capacity.reservation_id", value)),
        "capacity.reservation_id",
        "is not a capacity reservation id: cr- and 17 hex digits",
    )


@pytest.mark.parametrize(
    "value",
    [
        "arn:aws:ec2:us-west-2:123456789012:capacity-reservation/cr-0123456789abcdef0",
        "arn:aws:resource-groups:us-west-2:12345678901:group/g",
        "arn:aws:resource-groups:us-west-2:123456789012:group/",
        "arn:aws:resource-groups:us-west-2:123456789012:group/a b",
    ],
)
def test_a_bad_reservation_group_arn_is_rejected(value: str):
    document = with_value("capacity.reservation_group_arn", value, without("capacity.reservation_id"))
    assert_problem(problems_of(document), "capacity.reservation_group_arn", "is not the ARN of a resource group")


def test_a_reservation_group_in_another_region_is_rejected():
    arn = GROUP_ARN.replace("us-west-2", "us-east-1")
    document = with_value("capacity.reservation_group_arn", arn, without("capacity.reservation_id"))
    del document["capacity"]["availability_zone"]
    assert_problem(problems_of(document), "capacity.reservation_group_arn", "is in us-east-1, but region is us-west-2")


@pytest.mark.parametrize("instance_type", TRAINIUM_INSTANCE_TYPES)
def test_a_trainium_instance_type_is_accepted(instance_type: str):
    assert parse(with_value("capacity.instance_type", instance_type)).capacity.instance_type == instance_type


@pytest.mark.parametrize("instance_type", ["p4d.24xlarge", "inf2.48xlarge", "g5.xlarge", ""])
def test_a_non_trainium_instance_type_is_rejected(instance_type: str):
    problems = problems_of(with_value("capacity.instance_type", instance_type))
    assert_problem(problems, "capacity.instance_type", "is not a Trainium instance type; use one of trn1.2xlarge")


@pytest.mark.parametrize(
    ("instance_type", "meant"),
    [
        ("trn1.32xl", "trn1.32xlarge"),
        ("TRN1.32XLARGE", "trn1.32xlarge"),
        ("trn1n.32xl", "trn1n.32xlarge"),
        ("trn2.48xl", "trn2.48xlarge"),
        ("trn1.2xlarg", "trn1.2xlarge"),
    ],
)
def test_a_mistyped_trainium_instance_type_is_rejected_naming_the_one_meant(instance_type: str, meant: str):
    problems = problems_of(with_value("capacity.instance_type", instance_type))
    assert_problem(
        problems,
        "capacity.instance_type",
        f"{instance_type!r} is not a Trainium instance type; did you mean {meant!r}?",
    )


@pytest.mark.parametrize("nodes", [1, 2, 16, 128])
def test_a_node_count_from_1_to_128_is_accepted(nodes: int):
    assert parse(with_value("capacity.nodes", nodes)).capacity.nodes == nodes


@pytest.mark.parametrize(
    ("nodes", "fragment"),
    [
        (0, "0 is too small: the least is 1"),
        (-1, "-1 is too small: the least is 1"),
        (129, "129 is too large: the most is 128"),
    ],
)
def test_a_node_count_outside_1_to_128_is_rejected(nodes: int, fragment: str):
    assert_problem(problems_of(with_value("capacity.nodes", nodes)), "capacity.nodes", fragment)


@pytest.mark.parametrize(
    ("nodes", "fragment"),
    [
        ("16", "'16' is text, because of its quotes, not a whole number: remove the quotes (nodes: 16)"),
        ("sixteen", "'sixteen' is not a whole number"),
        (16.0, "16.0 is not a whole number"),
        (True, "true is not a whole number"),
        (None, "has no value: give a whole number"),
    ],
)
def test_a_node_count_must_be_an_integer_and_is_not_coerced(nodes: Any, fragment: str):
    assert_problem(problems_of(with_value("capacity.nodes", nodes)), "capacity.nodes", fragment)


def test_the_availability_zone_is_optional():
    assert parse(without("capacity.availability_zone")).capacity.availability_zone is None


@pytest.mark.parametrize("zone", ["us-west-2", "us-west-2dd", "us-west-2D", "usw2-az4", "us-west-2d\n"])
def test_a_bad_availability_zone_is_rejected(zone: str):
    problems = problems_of(with_value("capacity.availability_zone", zone))
    assert_problem(problems, "capacity.availability_zone", "is not an availability zone: a region and a letter")


def test_an_availability_zone_outside_the_region_is_rejected():
    problems = problems_of(with_value("capacity.availability_zone", "us-east-1a"))
    assert_problem(problems, "capacity.availability_zone", "us-east-1a is not in region us-west-2")


def test_a_zone_whose_region_only_shares_a_prefix_is_rejected():
    document = with_value("region", "us-west-1", with_value("capacity.availability_zone", "us-west-2a"))
    assert_problem(problems_of(document), "capacity.availability_zone", "is not in region us-west-1")


def test_an_availability_zone_without_a_region_is_accepted():
    assert parse(without("region")).capacity.availability_zone == "us-west-2d"


# --- network --------------------------------------------------------------------------------

EXISTING_NETWORK = {
    "vpc_id": "vpc-0123456789abcdef0",
    "public_subnet_id": "subnet-01234567",
    "private_subnet_id": "subnet-0123456789abcdef0",
}


def test_a_new_network_takes_a_cidr():
    spec = parse(with_value("network", {"vpc_cidr": "10.1.0.0/20"}))
    assert (spec.network.cidr, spec.network.existing) == ("10.1.0.0/20", None)


def test_an_existing_network_takes_a_vpc_and_both_subnets():
    spec = parse(with_value("network", EXISTING_NETWORK))
    assert spec.network.existing is not None
    assert spec.network.existing.private_subnet_id == "subnet-0123456789abcdef0"


@pytest.mark.parametrize("missing", ["vpc_id", "public_subnet_id", "private_subnet_id"])
def test_a_partial_existing_network_is_rejected(missing: str):
    network = {key: value for key, value in EXISTING_NETWORK.items() if key != missing}
    problems = problems_of(with_value("network", network))
    assert_problem(problems, "network", "needs vpc_id, public_subnet_id and private_subnet_id")


def test_a_cidr_with_an_existing_network_is_rejected():
    problems = problems_of(with_value("network", {**EXISTING_NETWORK, "vpc_cidr": "10.0.0.0/16"}))
    assert_problem(problems, "network", "not both")


@pytest.mark.parametrize("cidr", ["10.0.0.0/16", "172.16.0.0/27", "192.168.0.0/24"])
def test_a_cidr_from_16_to_27_is_accepted(cidr: str):
    assert parse(with_value("network.vpc_cidr", cidr)).network.cidr == cidr


@pytest.mark.parametrize("cidr", ["10.0.0.0/8", "10.0.0.0/15", "10.0.0.0/28", "10.0.0.0/32"])
def test_a_cidr_prefix_outside_16_to_27_is_rejected(cidr: str):
    assert_problem(problems_of(with_value("network.vpc_cidr", cidr)), "network.vpc_cidr", "is outside /16 to /27")


@pytest.mark.parametrize(
    "cidr", ["fd00::/56", "10.0.0.1/16", "10.0.0.256/16", "10.0.0/16", "ten/16", "10.0.0.0/16; id"]
)
def test_a_cidr_that_is_not_an_ipv4_block_is_rejected(cidr: str):
    assert_problem(problems_of(with_value("network.vpc_cidr", cidr)), "network.vpc_cidr", "is not an IPv4 CIDR block")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vpc_id", "vpc-0123"),
        ("vpc_id", "vpc-0123456789ABCDEF0"),
        ("public_subnet_id", "sub-01234567"),
        ("private_subnet_id", "subnet-0123456789abcdef"),
    ],
)
def test_a_bad_existing_network_id_is_rejected(field: str, value: str):
    problems = problems_of(with_value("network", {**EXISTING_NETWORK, field: value}))
    assert_problem(problems, f"network.{field}", f"{value!r} is not a")


# --- storage --------------------------------------------------------------------------------


def fsx(**fields: Any) -> dict[str, Any]:
    return with_value("storage", {"fsx": fields})


def test_an_existing_file_system_is_named_by_id():
    assert parse(fsx(file_system_id="fs-0123456789abcdef0")).storage.fsx.file_system_id == "fs-0123456789abcdef0"


@pytest.mark.parametrize("value", ["fs-0123", "fs-0123456789ABCDEF0", "fsx-01234567", "fs-01234567 ", "fs-01234567"])
def test_a_bad_file_system_id_is_rejected(value: str):
    assert_problem(problems_of(fsx(file_system_id=value)), "storage.fsx.file_system_id", "is not a file system id")


@pytest.mark.parametrize(
    "extra",
    [
        {"storage_capacity_gib": 1200},
        {"deployment_type": "PERSISTENT_2"},
        {"throughput_per_tib": 250},
        {"data_repository": "s3://bucket/prefix"},
    ],
)
def test_an_existing_file_system_with_new_file_system_fields_is_rejected(extra: dict[str, Any]):
    problems = problems_of(fsx(file_system_id="fs-0123456789abcdef0", **extra))
    field = next(iter(extra))
    assert_problem(
        problems, f"storage.fsx.{field}", "applies to a new file system only, not to an existing file_system_id"
    )


def test_every_file_system_problem_is_reported_each_at_its_field():
    # Given a scratch file system with a size, a throughput and a data repository it cannot have
    document = fsx(
        deployment_type="SCRATCH_2", storage_capacity_gib=1000, throughput_per_tib=125, data_repository="s3://bucket/p"
    )
    # When it is parsed
    problems = problems_of(document)
    # Then each problem is reported at its own field, not only the first
    assert_problem(problems, "storage.fsx.storage_capacity_gib", "1000 is not accepted for SCRATCH_2")
    assert_problem(problems, "storage.fsx.throughput_per_tib", "does not apply to SCRATCH_2")
    assert_problem(problems, "storage.fsx.data_repository", "needs deployment_type PERSISTENT_2")


def test_file_system_sizes_are_not_checked_against_a_deployment_type_that_is_invalid():
    problems = problems_of(fsx(deployment_type="SCRATCH_3", storage_capacity_gib=1000))
    assert [problem.path for problem in problems] == ["storage.fsx.deployment_type"]
    assert_problem(problems, "storage.fsx.deployment_type", "'SCRATCH_3' is not one of 'SCRATCH_1', 'SCRATCH_2'")


@pytest.mark.parametrize(
    ("deployment", "capacity"),
    [
        ("SCRATCH_1", 1200),
        ("SCRATCH_1", 2400),
        ("SCRATCH_1", 3600),
        ("SCRATCH_1", 7200),
        ("SCRATCH_2", 1200),
        ("SCRATCH_2", 4800),
        ("PERSISTENT_1", 2400),
        ("PERSISTENT_1", 9600),
        ("PERSISTENT_2", 1200),
        ("PERSISTENT_2", 2400),
        ("PERSISTENT_2", 4800),
        ("PERSISTENT_2", 2_400_000),
    ],
)
def test_a_capacity_aws_accepts_for_the_deployment_type_is_accepted(deployment: str, capacity: int):
    spec = parse(fsx(deployment_type=deployment, storage_capacity_gib=capacity))
    assert spec.storage.fsx.effective_storage_capacity_gib == capacity


@pytest.mark.parametrize(
    ("deployment", "capacity", "step"),
    [
        ("SCRATCH_1", 4800, 3600),
        ("SCRATCH_1", 6000, 3600),
        ("SCRATCH_2", 3600, 2400),
        ("PERSISTENT_1", 3600, 2400),
        ("PERSISTENT_2", 3600, 2400),
        ("PERSISTENT_2", 1000, 2400),
        ("PERSISTENT_2", 0, 2400),
        ("PERSISTENT_2", -2400, 2400),
        ("PERSISTENT_2", 2_402_400, 2400),
    ],
)
def test_a_capacity_off_the_deployment_types_steps_is_rejected(deployment: str, capacity: int, step: int):
    problems = problems_of(fsx(deployment_type=deployment, storage_capacity_gib=capacity))
    assert_problem(problems, "storage.fsx.storage_capacity_gib", f"is not accepted for {deployment}")
    assert_problem(problems, "storage.fsx.storage_capacity_gib", f"a multiple of {step}")


def test_the_capacity_rule_applies_to_the_default_deployment_type():
    assert_problem(problems_of(fsx(storage_capacity_gib=3600)), "storage.fsx.storage_capacity_gib", "PERSISTENT_2")


@pytest.mark.parametrize(
    ("capacity", "fragment"),
    [("1200", "remove the quotes (storage_capacity_gib: 1200)"), (1200.0, "1200.0 is not a whole number")],
)
def test_a_capacity_must_be_an_integer(capacity: Any, fragment: str):
    assert_problem(problems_of(fsx(storage_capacity_gib=capacity)), "storage.fsx.storage_capacity_gib", fragment)


@pytest.mark.parametrize(
    ("deployment", "throughput"),
    [("PERSISTENT_1", 50), ("PERSISTENT_1", 100), ("PERSISTENT_1", 200)]
    + [("PERSISTENT_2", value) for value in (125, 250, 500, 1000)],
)
def test_a_throughput_aws_accepts_for_the_deployment_type_is_accepted(deployment: str, throughput: int):
    spec = parse(fsx(deployment_type=deployment, throughput_per_tib=throughput))
    assert spec.storage.fsx.effective_throughput_per_tib == throughput


@pytest.mark.parametrize(
    ("deployment", "throughput"),
    [("PERSISTENT_1", 125), ("PERSISTENT_1", 250), ("PERSISTENT_2", 50), ("PERSISTENT_2", 200), ("PERSISTENT_2", 0)],
)
def test_a_throughput_the_deployment_type_does_not_offer_is_rejected(deployment: str, throughput: int):
    problems = problems_of(fsx(deployment_type=deployment, throughput_per_tib=throughput))
    assert_problem(problems, "storage.fsx.throughput_per_tib", f"{throughput} is not accepted for {deployment}")


@pytest.mark.parametrize("deployment", ["SCRATCH_1", "SCRATCH_2"])
def test_a_throughput_for_a_scratch_file_system_is_rejected(deployment: str):
    problems = problems_of(fsx(deployment_type=deployment, throughput_per_tib=125))
    assert_problem(problems, "storage.fsx.throughput_per_tib", f"does not apply to {deployment}")


@pytest.mark.parametrize(("deployment", "default"), [("SCRATCH_2", None), ("PERSISTENT_1", 100), ("PERSISTENT_2", 250)])
def test_the_default_throughput_depends_on_the_deployment_type(deployment: str, default: int | None):
    assert parse(fsx(deployment_type=deployment)).storage.fsx.effective_throughput_per_tib == default


@pytest.mark.parametrize("deployment", ["scratch_2", "PERSISTENT_3", "INTELLIGENT_TIERING", ""])
def test_an_unknown_deployment_type_is_rejected(deployment: str):
    assert_problem(problems_of(fsx(deployment_type=deployment)), "storage.fsx.deployment_type", "PERSISTENT_2")


def test_a_data_repository_with_persistent_2_is_accepted():
    spec = parse(fsx(deployment_type="PERSISTENT_2", data_repository="s3://my-bucket/datasets/"))
    assert spec.storage.fsx.data_repository == "s3://my-bucket/datasets/"


@pytest.mark.parametrize("deployment", ["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1"])
def test_a_data_repository_without_persistent_2_is_rejected(deployment: str):
    problems = problems_of(fsx(deployment_type=deployment, data_repository="s3://my-bucket/datasets"))
    assert_problem(problems, "storage.fsx.data_repository", "needs deployment_type PERSISTENT_2")
    assert_problem(problems, "storage.fsx.data_repository", f"not {deployment}")


@pytest.mark.parametrize(
    "uri",
    [
        "https://bucket/x",
        "s3://Bucket/x",
        "s3://-bucket/x",
        "s3://ab/x",
        "s3://bucket/a b",
        "s3://bucket/$(id)",
        "s3://bucket/it's",
    ],
)
def test_a_bad_data_repository_uri_is_rejected(uri: str):
    assert_problem(problems_of(fsx(data_repository=uri)), "storage.fsx.data_repository", "is not an S3 URI")


# --- cluster --------------------------------------------------------------------------------


@pytest.mark.parametrize("os_name", supported_os())
def test_an_os_the_pinned_neuron_release_serves_is_accepted(os_name: str):
    assert parse(with_value("cluster.os", os_name)).cluster.os == os_name


@pytest.mark.parametrize("os_name", sorted(set(PCLUSTER_OSES) - set(supported_os())))
def test_an_os_the_pinned_neuron_release_cannot_serve_is_rejected_with_the_reason_and_the_alternatives(os_name: str):
    # Given a ParallelCluster OS the pinned Neuron release has no PyTorch Neuron for (with the AMI rocky needs)
    document = with_value("cluster.custom_ami", "ami-0123456789abcdef0", with_value("cluster.os", os_name))
    # When it is parsed
    problems = problems_of(document)
    # Then cluster.os is the one problem, naming the value, the release, why, and the OSes to use instead
    assert [problem.path for problem in problems] == ["cluster.os"]
    assert_problem(problems, "cluster.os", f"{os_name!r} cannot run the Neuron SDK: trainrun installs Neuron 2.29.0")
    assert_problem(problems, "cluster.os", "whose setup guide")
    assert_problem(problems, "cluster.os", "; use 'ubuntu2204' or 'ubuntu2404'")


def test_amazon_linux_2023_is_rejected_because_the_pinned_release_has_no_pytorch_2_9_for_it():
    problems = problems_of(with_value("cluster.os", "alinux2023"))
    assert_problem(problems, "cluster.os", "PyTorch 2.9 is not yet available on Amazon Linux 2023")


@pytest.mark.parametrize("os_name", ["rocky8", "rocky9"])
def test_an_os_without_an_official_ami_is_rejected_without_a_custom_ami(os_name: str):
    # Given a run file for rocky (ParallelCluster publishes no rocky AMI) that names no AMI
    problems = problems_of(with_value("cluster.os", os_name))
    # Then it is rejected at cluster.custom_ami, saying why and how to fix it
    assert_problem(problems, "cluster.custom_ami", f"is required for os {os_name}")
    assert_problem(problems, "cluster.custom_ami", "pcluster build-image")


@pytest.mark.parametrize("ami", ["ami-0123abcd", "ami-0123456789abcdef0"])
def test_a_custom_ami_id_of_either_length_is_accepted(ami: str):
    document = with_value("cluster.custom_ami", ami)
    assert parse(document).cluster.custom_ami == ami


@pytest.mark.parametrize("ami", ["ami-0123abc", "ami-0123456789ABCDEF0", "ami-0123456789abcdef", "0123456789abcdef0"])
def test_a_malformed_custom_ami_is_rejected(ami: str):
    problems = problems_of(with_value("cluster.custom_ami", ami, with_value("cluster.os", "rocky9")))
    assert any(path == "cluster.custom_ami" for path, *_ in problems), problems


def test_a_retired_os_is_rejected_naming_its_replacement():
    problems = problems_of(with_value("cluster.os", "ubuntu2004"))
    assert_problem(
        problems, "cluster.os", "'ubuntu2004' is no longer supported by ParallelCluster 3.16; use 'ubuntu2204'"
    )


@pytest.mark.parametrize(("retired", "successor"), [("alinux2", "alinux2023"), ("centos7", "rocky8")])
def test_a_retired_os_whose_successor_cannot_run_the_neuron_sdk_is_rejected_naming_the_oses_that_can(
    retired: str, successor: str
):
    problems = problems_of(with_value("cluster.os", retired))
    assert_problem(
        problems,
        "cluster.os",
        f"'{retired}' is no longer supported by ParallelCluster 3.16; use 'ubuntu2204' or 'ubuntu2404' "
        f"(its successor '{successor}' cannot run the Neuron SDK)",
    )


@pytest.mark.parametrize("os_name", ["windows", "amzn2", ""])
def test_an_unknown_os_is_rejected_listing_the_supported_ones(os_name: str):
    problems = problems_of(with_value("cluster.os", os_name))
    assert_problem(problems, "cluster.os", "is not a ParallelCluster 3.16 OS; use one of ubuntu2204, ubuntu2404")


@pytest.mark.parametrize(("os_name", "meant"), [("Ubuntu2204", "ubuntu2204"), ("ubuntu22.04", "ubuntu2204")])
def test_a_mistyped_os_is_rejected_naming_the_one_meant(os_name: str, meant: str):
    problems = problems_of(with_value("cluster.os", os_name))
    assert_problem(problems, "cluster.os", f"is not a ParallelCluster 3.16 OS; did you mean {meant!r}?")


@pytest.mark.parametrize("instance_type", ["c5.4xlarge", "m7i.48xlarge", "u-6tb1.metal", "c6in.2xlarge"])
def test_an_ec2_instance_type_is_accepted_for_the_head_node(instance_type: str):
    assert parse(with_value("cluster.head_node_instance_type", instance_type)).cluster.head_node_instance_type == (
        instance_type
    )


@pytest.mark.parametrize("instance_type", ["c5", "C5.4XLARGE", ".4xlarge", "c5.4xlarge;id", "c5 .4xlarge", "-c5.large"])
def test_a_bad_head_node_instance_type_is_rejected(instance_type: str):
    problems = problems_of(with_value("cluster.head_node_instance_type", instance_type))
    assert_problem(problems, "cluster.head_node_instance_type", "is not an EC2 instance type in lower case")


# --- workload source ------------------------------------------------------------------------


def source(**fields: Any) -> dict[str, Any]:
    return with_value("workload.source", fields)


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/aws-neuron/aws-neuron-samples.git",
        "https://git.example.com:8443/team/repo",
        "git@github.com:aws-neuron/aws-neuron-samples.git",
    ],
)
def test_a_git_url_is_accepted(url: str):
    assert parse(source(git=url)).workload.source.git == url


@pytest.mark.parametrize(
    "url",
    [
        "http://github.com/a/b",
        "file:///etc",
        "ext::sh -c id",
        "https://github.com/a/b c",
        "git@-oProxyCommand=id:x",
        "git@-oProxyCommand:x",
        "https://-x/y",
        "https://github.com/a/$(id)",
    ],
)
def test_a_bad_git_url_is_rejected(url: str):
    assert_problem(problems_of(source(git=url)), "workload.source.git", "is not a git URL")


def test_an_s3_archive_source_is_accepted():
    spec = parse(source(s3="s3://trainrun-examples/local-workload.tar.gz"))
    assert spec.workload.source.s3 == "s3://trainrun-examples/local-workload.tar.gz"


def test_both_git_and_s3_are_rejected():
    problems = problems_of(source(git="https://github.com/a/b", s3="s3://bucket/w.tar"))
    assert_problem(problems, "workload.source", "give exactly one of git (with an optional ref), s3 or path")


@pytest.mark.parametrize("path", ["./my-code", "my-code", "../common code/src", "."])
def test_a_local_directory_source_is_accepted(path: str):
    # A directory relative to the run file's; `trainrun submit` packs it (trainrun.ops.source_archive).
    assert parse(source(path=path)).workload.source.path == path


@pytest.mark.parametrize("path", ["/home/me/code", "~/code", "", "code\nmore"])
def test_a_local_directory_that_is_absolute_or_not_one_line_is_rejected(path: str):
    assert_problem(problems_of(source(path=path)), "workload.source.path", "directory relative to the run file")


def test_a_local_directory_path_is_bounded():
    assert_problem(problems_of(source(path="x" * 1025)), "workload.source.path", "at most 1024")


def test_a_local_directory_with_another_source_or_a_ref_is_rejected():
    assert_problem(problems_of(source(path="code", s3="s3://bucket/w.tar")), "workload.source", "exactly one of")
    assert_problem(problems_of(source(path="code", ref="main")), "workload.source.ref", "applies to a git source")


def test_neither_git_nor_s3_is_rejected():
    assert_problem(problems_of(source()), "workload.source", "give exactly one of git")


def test_a_ref_with_an_s3_source_is_rejected():
    problems = problems_of(source(s3="s3://bucket/w.tar.gz", ref="main"))
    assert_problem(problems, "workload.source.ref", "applies to a git source only")


@pytest.mark.parametrize("ref", ["main", "v1.2.3", "release/2.x", "0a1b2c3d", "_x"])
def test_a_git_ref_is_accepted(ref: str):
    assert parse(source(git="https://github.com/a/b", ref=ref)).workload.source.ref == ref


@pytest.mark.parametrize("ref", ["-main", "--upload-pack=id", "", "main branch", "a;b", "x" * 129, "/main"])
def test_a_bad_git_ref_is_rejected(ref: str):
    problems = problems_of(source(git="https://github.com/a/b", ref=ref))
    assert_problem(problems, "workload.source.ref", "is not a branch, tag or commit")


@pytest.mark.parametrize("key", ["w.tar.gz", "w.tgz", "dir/w.tar"])
def test_an_s3_source_that_is_an_archive_is_accepted(key: str):
    assert parse(source(s3=f"s3://bucket/{key}")).workload.source.s3 == f"s3://bucket/{key}"


@pytest.mark.parametrize("uri", ["s3://bucket/w.zip", "s3://bucket/dir/", "s3://bucket", "s3://bucket/w.tar.gz.txt"])
def test_an_s3_source_that_is_not_an_archive_is_rejected(uri: str):
    assert_problem(problems_of(source(s3=uri)), "workload.source.s3", "must name a .tar.gz, .tgz or .tar archive")


# --- workload paths, env and runtime --------------------------------------------------------


@pytest.mark.parametrize("workdir", [".", "torch-neuronx/training/dp_bert_hf_pretrain", "a/./b", ".hidden", "a..b"])
def test_a_relative_workdir_is_accepted(workdir: str):
    assert parse(with_value("workload.workdir", workdir)).workload.workdir == workdir


@pytest.mark.parametrize("workdir", ["..", "a/../..", "a/..", "../etc"])
def test_a_workdir_leaving_the_workload_is_rejected(workdir: str):
    assert_problem(
        problems_of(with_value("workload.workdir", workdir)), "workload.workdir", "must not contain '..' segments"
    )


@pytest.mark.parametrize("workdir", ["/etc", "/", "-rf", "", "a b", "~/x", "a;b"])
def test_an_absolute_or_odd_workdir_is_rejected(workdir: str):
    assert_problem(
        problems_of(with_value("workload.workdir", workdir)), "workload.workdir", "is not a path inside the workload"
    )


def dataset(**fields: Any) -> dict[str, Any]:
    return with_value("workload.dataset", {"source": "s3://bucket/data.tar", "path": "/fsx/data", **fields})


@pytest.mark.parametrize("path", ["/fsx", "/fsx/", "/fsx/examples_datasets", "/fsx/a/b.c/d-e/"])
def test_a_dataset_path_under_fsx_is_accepted(path: str):
    assert parse(dataset(path=path)).workload.dataset.path == path


@pytest.mark.parametrize("path", ["/tmp/data", "fsx/data", "/fsxdata", "/fsx//a", "/fsx/a b", "/home/fsx"])
def test_a_dataset_path_outside_fsx_is_rejected(path: str):
    assert_problem(problems_of(dataset(path=path)), "workload.dataset.path", "is not a path under /fsx")


@pytest.mark.parametrize("path", ["/fsx/..", "/fsx/a/../../etc"])
def test_a_dataset_path_climbing_out_of_fsx_is_rejected(path: str):
    assert_problem(problems_of(dataset(path=path)), "workload.dataset.path", "must not contain '..'")


def test_a_dataset_source_must_be_an_s3_uri():
    problems = problems_of(dataset(source="https://example.com/data.tar"))
    assert_problem(problems, "workload.dataset.source", "is not an S3 URI")


@pytest.mark.parametrize("field", ["source", "path"])
def test_a_dataset_needs_source_and_path(field: str):
    document = dataset()
    del document["workload"]["dataset"][field]
    assert_problem(problems_of(document), f"workload.dataset.{field}", "is required")


def test_environment_variables_are_accepted():
    env = {"NEURON_RT_EXEC_TIMEOUT": "600", "_X1": "", "QUOTED": 'it\'s "$HOME"; ok'}
    assert parse(with_value("workload.env", env)).workload.env == env


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", "A=B", "ÄB", "", "A" * 129])
def test_a_bad_environment_variable_name_is_rejected(name: str):
    problems = problems_of(with_value("workload.env", {name: "x"}))
    assert_problem(problems, f"workload.env.{name}.[key]", "is not an environment variable name")


@pytest.mark.parametrize("name", ["IFS", "_", "BASH_ENV", "UID", "SHELLOPTS", "RANDOM"])
def test_an_environment_variable_name_the_shell_reserves_is_rejected(name: str):
    problems = problems_of(with_value("workload.env", {name: "x"}))
    assert_problem(problems, f"workload.env.{name}.[key]", "is a name the shell reserves")


def test_a_common_environment_variable_name_may_be_set():
    env = {"ENV": "prod", "LD_LIBRARY_PATH": "/opt/lib", "NEURON_CC_FLAGS": "--model-type=transformer"}
    assert parse(with_value("workload.env", env)).workload.env == env


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "tab\there", "é", "\x00"])
def test_a_bad_environment_variable_value_is_rejected(value: str):
    problems = problems_of(with_value("workload.env", {"NAME": value}))
    assert_problem(problems, "workload.env.NAME", "is not text on one line, of printable ASCII characters")


def test_an_environment_variable_value_longer_than_4096_is_rejected():
    problems = problems_of(with_value("workload.env", {"NAME": "x" * 4097}))
    assert_problem(problems, "workload.env.NAME", "is 4097 characters; at most 4096")


@pytest.mark.parametrize(
    ("written", "fragment"),
    [
        ("600", 'is read as a number, not text: quote it (NAME: "600")'),
        ("1.5", 'is read as a number, not text: quote it (NAME: "1.5")'),
        # YAML 1.1 reads yes/no/on/off as booleans: the fix quotes what was written
        ("yes", 'yes is read as the boolean true, not text: quote it (NAME: "yes")'),
        ("off", 'off is read as the boolean false, not text: quote it (NAME: "off")'),
        ("", "has no value: give text"),
    ],
)
def test_an_environment_variable_value_must_be_a_string_and_the_fix_quotes_it(written: str, fragment: str):
    text = yaml.safe_dump(with_value("workload.env", {"NAME": "PLACEHOLDER"})).replace("PLACEHOLDER", written)
    assert_problem(problems_of(text), "workload.env.NAME", fragment)


def test_at_most_128_environment_variables_are_accepted():
    env = {f"V{index}": "x" for index in range(129)}
    assert_problem(problems_of(with_value("workload.env", env)), "workload.env", "at most 128")


@pytest.mark.parametrize("field", ["setup", "compile", "train"])
def test_a_shell_field_may_hold_any_shell_text(field: str):
    command = "cd \"$HOME\" && echo 'x' | tee /tmp/y; ls -1 *.py\nexit 0"
    assert getattr(parse(with_value(f"workload.{field}", command)).workload, field) == command


@pytest.mark.parametrize("field", ["setup", "compile", "train"])
def test_an_empty_shell_field_is_rejected(field: str):
    assert_problem(problems_of(with_value(f"workload.{field}", "")), f"workload.{field}", "is empty: give a command")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1m", 60), ("60s", 60), ("90m", 5400), ("24h", 86400), ("30d", 30 * 86400), ("720h", 2592000)],
)
def test_a_max_runtime_from_1m_to_30d_is_accepted(value: str, seconds: int):
    assert parse(with_value("workload.max_runtime", value)).workload.max_runtime_seconds == seconds


@pytest.mark.parametrize("value", ["59s", "31d", "721h", "99999999999999d"])
def test_a_max_runtime_outside_1m_to_30d_is_rejected(value: str):
    assert_problem(
        problems_of(with_value("workload.max_runtime", value)), "workload.max_runtime", "is outside 1m to 30d"
    )


def test_node_bootstrap_timeout_defaults_to_parallelclusters_own_30_minutes():
    assert parse(valid_document()).workload.node_bootstrap_timeout_seconds == 1800


@pytest.mark.parametrize(("value", "seconds"), [("1m", 60), ("45m", 2700), ("1d", 86400)])
def test_a_node_bootstrap_timeout_from_1m_to_1d_is_accepted(value: str, seconds: int):
    workload = parse(with_value("workload.node_bootstrap_timeout", value)).workload
    assert workload.node_bootstrap_timeout_seconds == seconds


@pytest.mark.parametrize("value", ["59s", "25h", "2d"])
def test_a_node_bootstrap_timeout_outside_1m_to_1d_is_rejected_naming_the_default(value: str):
    problems = problems_of(with_value("workload.node_bootstrap_timeout", value))
    assert_problem(problems, "workload.node_bootstrap_timeout", f"'{value}' is outside 1m to 1d")
    assert_problem(problems, "workload.node_bootstrap_timeout", "(the default, 30m)")


def test_a_node_bootstrap_timeout_that_is_not_a_duration_is_rejected():
    assert_problem(
        problems_of(with_value("workload.node_bootstrap_timeout", "half an hour")),
        "workload.node_bootstrap_timeout",
        "is not a number and a unit (s, m, h or d), e.g. 30m",
    )


@pytest.mark.parametrize("value", ["0h", "24", "1.5h", "24H", "1w", "h", "01h", "1h30m", " 1h", "-1h"])
def test_a_max_runtime_that_is_not_a_duration_is_rejected(value: str):
    assert_problem(
        problems_of(with_value("workload.max_runtime", value)),
        "workload.max_runtime",
        "is not a number and a unit (s, m, h or d), e.g. 30m",
    )


def test_a_max_runtime_must_be_a_string():
    assert_problem(
        problems_of(with_value("workload.max_runtime", 3600)),
        "workload.max_runtime",
        '3600 is read as a number, not text: quote it (max_runtime: "3600")',
    )


@pytest.mark.parametrize(("value", "seconds"), [("45s", 45), ("2m", 120), ("3h", 10800), ("1d", 86400)])
def test_duration_seconds_converts_each_unit(value: str, seconds: int):
    assert duration_seconds(value) == seconds


@pytest.mark.parametrize("value", ["", "1", "1y", "0s", "1h\n"])
def test_duration_seconds_rejects_what_is_not_a_duration(value: str):
    with pytest.raises(ValueError, match="is not a duration"):
        duration_seconds(value)


# --- teardown -------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["on_success", "on_failure"])
@pytest.mark.parametrize("choice", ["delete", "keep"])
def test_a_teardown_choice_is_accepted(field: str, choice: str):
    assert getattr(parse(with_value(f"teardown.{field}", choice)).teardown, field) == choice


@pytest.mark.parametrize("field", ["on_success", "on_failure"])
@pytest.mark.parametrize("choice", ["Delete", "retain", "", False])
def test_a_teardown_choice_outside_delete_or_keep_is_rejected(field: str, choice: Any):
    assert_problem(problems_of(with_value(f"teardown.{field}", choice)), f"teardown.{field}", "'delete' or 'keep'")


def test_keep_file_system_is_a_boolean():
    assert parse(with_value("teardown.keep_file_system", True)).teardown.keep_file_system is True


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("yes", "'yes' is not true or false"),
        (
            "true",
            "'true' is text, because of its quotes, not true or false: remove the quotes (keep_file_system: true)",
        ),
        (1, "1 is not true or false"),
    ],
)
def test_keep_file_system_is_not_coerced_from_text_or_numbers(value: Any, fragment: str):
    problems = problems_of(with_value("teardown.keep_file_system", value))
    assert_problem(problems, "teardown.keep_file_system", fragment)


# --- workload.resume_from (checkpoints that outlive teardown) ---------------------------------------


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("s3://my-bucket/checkpoints/bert-large-0123456789ab/", "s3://my-bucket/checkpoints/bert-large-0123456789ab/"),
        ("s3://my-bucket/checkpoints/bert-large-0123456789ab", "s3://my-bucket/checkpoints/bert-large-0123456789ab/"),
    ],
    ids=["prefix", "without-the-trailing-slash"],
)
def test_resume_from_is_kept_as_a_prefix(given: str, kept: str) -> None:
    # A prefix 'step-1' would also match 'step-10/...': the directory form is the one every reader sees
    assert parse(with_value("workload.resume_from", given)).workload.resume_from == kept


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("s3://my-bucket", "names a whole bucket"),
        ("s3://my-bucket/", "names a whole bucket"),
        ("s3://my-bucket/a//b/", "empty path segment"),
        ("https://my-bucket.s3.amazonaws.com/checkpoints/", "is not an S3 URI"),
        ("s3://my-bucket/check points/", "is not an S3 URI"),
    ],
    ids=["bucket", "bucket-slash", "double-slash", "not-s3", "space"],
)
def test_resume_from_that_is_not_a_prefix_of_a_bucket_is_rejected(value: str, fragment: str) -> None:
    assert_problem(problems_of(with_value("workload.resume_from", value)), "workload.resume_from", fragment)


# --- resume after failure ---------------------------------------------------------------------


def test_a_run_without_resume_is_never_resubmitted_and_one_with_resume_twice() -> None:
    assert parse(valid_document()).workload.train_retries == 0
    resumable = parse(with_value("workload.resume", "./train.sh --resume_ckpt"))
    assert resumable.workload.train_retries == 2
    # Each resubmission runs resume; the first submission runs train
    assert resumable.workload.train_command(1) == "./train.sh"
    assert resumable.workload.train_command(2) == "./train.sh --resume_ckpt"


def test_workload_retries_overrides_the_default_with_or_without_resume() -> None:
    assert parse(with_value("workload.retries", 3)).workload.train_retries == 3
    # Without resume, a resubmission runs train again (the script resumes from TRAINRUN_CHECKPOINT_DIR itself)
    assert parse(with_value("workload.retries", 3)).workload.train_command(2) == "./train.sh"
    document = with_value("workload.resume", "./resume.sh")
    assert parse(with_value("workload.retries", 0, document)).workload.train_retries == 0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (11, "11 is too large: the most is 10"),
        (-1, "-1 is too small: the least is 0"),
        ("two", "'two' is not a whole number"),
        (True, "true is not a whole number"),
    ],
)
def test_workload_retries_is_bounded(value: Any, message: str) -> None:
    (problem,) = problems_of(with_value("workload.retries", value))
    assert (problem.path, problem.message) == ("workload.retries", message)


def test_workload_resume_is_a_shell_field_like_train() -> None:
    (problem,) = problems_of(with_value("workload.resume", ""))
    assert problem.path == "workload.resume"


# --- teardown.keep_for ----------------------------------------------------------------------------


def test_a_kept_cluster_may_say_how_long_it_stays_idle():
    document = with_value("teardown", {"on_success": "keep", "keep_for": "2h"})
    assert parse(document).teardown.keep_for == "2h"


@pytest.mark.parametrize("value", ["9m", "31d", "soon"])
def test_a_keep_for_outside_10m_to_30d_is_rejected(value: str):
    problems = problems_of(with_value("teardown", {"on_success": "keep", "keep_for": value}))
    assert_problem(problems, "teardown.keep_for", value)


def test_a_keep_for_with_nothing_kept_is_rejected_with_the_fix():
    problems = problems_of(with_value("teardown", {"keep_for": "2h"}))
    assert_problem(problems, "teardown.keep_for", "set on_success: keep (or on_failure: keep), or remove keep_for")
