"""Properties of the run-file parser: every valid document parses, and no bad value gets past it.

The strategies here build valid field values and documents; tests/unit/test_shell_quoting.py reuses them.
"""

from __future__ import annotations

import copy
import ipaddress
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainrun.errors import Problem, RunSpecInvalid
from trainrun.logic.neuron_install import supported_os
from trainrun.model.run_file import (
    AMI_ID,
    EC2_INSTANCE_TYPE,
    ENV_NAME,
    FILE_SYSTEM_ID,
    FSX_CAPACITY_STEP_GIB,
    FSX_MAX_CAPACITY_GIB,
    FSX_PATH,
    FSX_THROUGHPUT_PER_TIB,
    GIT_REF,
    GIT_URL,
    REGION,
    RELATIVE_PATH,
    RESERVATION_ID,
    RUN_NAME,
    SUBNET_ID,
    TRAINIUM_INSTANCE_TYPES,
    VPC_ID,
    RunSpec,
    env_name_problem,
    git_ref_format_problem,
    parse_run_file,
)

# A document takes ~15 ms to draw (from_regex is slow); these budgets keep the file under 10 s.


def budget(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def matching(pattern: str, max_length: int = 2048) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, fullmatch=True).filter(lambda value: len(value) <= max_length)


def without_parent_segments(value: str) -> bool:
    return ".." not in value.split("/")


# --- valid field values ---------------------------------------------------------------------

names = matching(RUN_NAME, 40)
regions = matching(REGION, 32)
reservation_ids = matching(RESERVATION_ID)
vpc_ids = matching(VPC_ID)
subnet_ids = matching(SUBNET_ID)
file_system_ids = matching(FILE_SYSTEM_ID)
git_urls = matching(GIT_URL, 512)
git_refs = matching(GIT_REF).filter(lambda ref: git_ref_format_problem(ref) is None)
workdirs = matching(RELATIVE_PATH).filter(without_parent_segments)
fsx_paths = matching(FSX_PATH, 512).filter(without_parent_segments)
env_names = matching(ENV_NAME).filter(lambda name: env_name_problem(name) is None)
env_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=64)
head_node_instance_types = matching(EC2_INSTANCE_TYPE, 64)
durations = st.one_of(
    st.integers(60, 30 * 86400).map(lambda n: f"{n}s"),
    st.integers(1, 30 * 1440).map(lambda n: f"{n}m"),
    st.integers(1, 30 * 24).map(lambda n: f"{n}h"),
    st.integers(1, 30).map(lambda n: f"{n}d"),
)
# Shell fields take any text; YAML cannot carry surrogates.
# Shell fields hold any text but the control characters no shell command can hold (tab and newline are fine).
SHELL_FORBIDDEN_CHARACTERS = "".join(map(chr, [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F]))
shell_text = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters=SHELL_FORBIDDEN_CHARACTERS), min_size=1, max_size=200
)

_buckets = st.from_regex(r"[a-z0-9][a-z0-9.-]{1,20}[a-z0-9]", fullmatch=True)
_s3_keys = st.from_regex(r"[A-Za-z0-9_.=+/-]{0,40}", fullmatch=True)
s3_uris = st.builds(lambda bucket, key: f"s3://{bucket}/{key}", _buckets, _s3_keys)
s3_archives = st.builds(
    lambda bucket, key, suffix: f"s3://{bucket}/{key}{suffix}",
    _buckets,
    _s3_keys,
    st.sampled_from([".tar.gz", ".tgz", ".tar"]),
)
vpc_cidrs = st.builds(
    lambda address, prefix: str(ipaddress.IPv4Network((address, prefix), strict=False)),
    st.integers(0, 2**32 - 1),
    st.integers(16, 27),
)


@st.composite
def group_arns(draw: st.DrawFn, region: str) -> str:
    partition = draw(st.sampled_from(["aws", "aws-cn", "aws-us-gov", "aws-iso", "aws-iso-b"]))
    account = draw(st.from_regex(r"[0-9]{12}", fullmatch=True))
    group = draw(st.from_regex(r"[A-Za-z0-9_.-]{1,128}", fullmatch=True))
    return f"arn:{partition}:resource-groups:{region}:{account}:group/{group}"


@st.composite
def new_file_systems(draw: st.DrawFn, with_data_repository: bool | None = None) -> dict[str, Any]:
    deployment = draw(st.sampled_from([None, *FSX_CAPACITY_STEP_GIB]))
    effective = deployment or "PERSISTENT_2"
    if with_data_repository:
        deployment = draw(st.sampled_from([None, "PERSISTENT_2"]))
        effective = "PERSISTENT_2"
    step = FSX_CAPACITY_STEP_GIB[effective]
    fsx: dict[str, Any] = {}
    if deployment is not None:
        fsx["deployment_type"] = deployment
    capacity = draw(
        st.one_of(
            st.none(), st.sampled_from([1200, 2400]), st.integers(1, FSX_MAX_CAPACITY_GIB // step).map(step.__mul__)
        )
    )
    if capacity is not None:
        fsx["storage_capacity_gib"] = capacity
    if effective in FSX_THROUGHPUT_PER_TIB and draw(st.booleans()):
        fsx["throughput_per_tib"] = draw(st.sampled_from(FSX_THROUGHPUT_PER_TIB[effective]))
    if effective == "PERSISTENT_2" and (with_data_repository or (with_data_repository is None and draw(st.booleans()))):
        fsx["data_repository"] = draw(s3_uris)
    return fsx


# `target` names a field the document must contain (so that a test can spoil it).
@st.composite
def run_documents(draw: st.DrawFn, target: str = "") -> dict[str, Any]:
    region = draw(st.one_of(st.none(), regions)) if target != "region" else draw(regions)
    zone_region = region or draw(regions)
    use_group = target == "capacity.reservation_group_arn" or (
        target != "capacity.reservation_id" and draw(st.booleans())
    )
    if use_group and region is None:
        region = zone_region
    capacity: dict[str, Any] = {
        "instance_type": draw(st.sampled_from(TRAINIUM_INSTANCE_TYPES)),
        "nodes": draw(st.integers(1, 128)),
    }
    if use_group:
        capacity["reservation_group_arn"] = draw(group_arns(zone_region))
    else:
        capacity["reservation_id"] = draw(reservation_ids)
    if target == "capacity.availability_zone" or draw(st.booleans()):
        capacity["availability_zone"] = zone_region + draw(st.sampled_from("abcdef"))
    document: dict[str, Any] = {"name": draw(names), "capacity": capacity}
    if region is not None:
        document["region"] = region

    if target.startswith("network.vpc_cidr"):
        document["network"] = {"vpc_cidr": draw(vpc_cidrs)}
    elif target.startswith("network."):
        document["network"] = {"vpc_id": draw(vpc_ids), "public_subnet_id": draw(subnet_ids)}
        document["network"]["private_subnet_id"] = draw(subnet_ids)
    else:
        network = draw(
            st.one_of(
                st.none(),
                st.fixed_dictionaries({"vpc_cidr": vpc_cidrs}),
                st.fixed_dictionaries(
                    {"vpc_id": vpc_ids, "public_subnet_id": subnet_ids, "private_subnet_id": subnet_ids}
                ),
            )
        )
        if network is not None:
            document["network"] = network

    if target == "storage.fsx.file_system_id":
        document["storage"] = {"fsx": {"file_system_id": draw(file_system_ids)}}
    elif target == "storage.fsx.data_repository":
        document["storage"] = {"fsx": draw(new_file_systems(with_data_repository=True))}
    elif target == "storage.fsx.deployment_type":
        document["storage"] = {"fsx": {"deployment_type": "PERSISTENT_2"}}
    else:
        fsx = draw(st.one_of(st.none(), st.fixed_dictionaries({"file_system_id": file_system_ids}), new_file_systems()))
        if fsx is not None:
            document["storage"] = {"fsx": fsx}

    cluster = draw(
        st.fixed_dictionaries(
            {}, optional={"os": st.sampled_from(supported_os()), "head_node_instance_type": head_node_instance_types}
        )
    )
    if target == "cluster.os":
        cluster["os"] = draw(st.sampled_from(supported_os()))
    if target == "cluster.head_node_instance_type":
        cluster["head_node_instance_type"] = draw(head_node_instance_types)
    if target == "cluster.custom_ami":
        cluster["custom_ami"] = draw(st.from_regex(AMI_ID, fullmatch=True))
    if cluster:
        document["cluster"] = cluster

    if target == "workload.source.s3" or (not target.startswith("workload.source.") and draw(st.booleans())):
        source = {"s3": draw(s3_archives)}
    else:
        source = {"git": draw(git_urls)}
        if target == "workload.source.ref" or draw(st.booleans()):
            source["ref"] = draw(git_refs)
    workload: dict[str, Any] = {"source": source, "train": draw(shell_text)}
    optional = {
        "workdir": workdirs,
        "setup": shell_text,
        "compile": shell_text,
        "dataset": st.fixed_dictionaries({"source": s3_uris, "path": fsx_paths}),
        "env": st.dictionaries(env_names, env_values, max_size=4),
        "max_runtime": durations,
    }
    for field, strategy in optional.items():
        if target.startswith(f"workload.{field}") or draw(st.booleans()):
            workload[field] = draw(strategy)
    if target.startswith("workload.env") and not workload["env"]:
        workload["env"] = {draw(env_names): draw(env_values)}
    document["workload"] = workload

    teardown = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "on_success": st.sampled_from(["delete", "keep"]),
                "on_failure": st.sampled_from(["delete", "keep"]),
                "keep_file_system": st.booleans(),
            },
        )
    )
    if target.startswith("teardown."):
        teardown[target.removeprefix("teardown.")] = "delete"
    if teardown:
        document["teardown"] = teardown
    return document


def as_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False)


# --- (a) every valid document parses and round-trips ----------------------------------------


@budget(80)
@given(run_documents())
def test_a_valid_document_parses_to_what_it_says(document: dict[str, Any]):
    # Given a valid run file as YAML text
    # When it is parsed
    spec = parse_run_file(as_yaml(document))
    # Then it means what the document says, and its dump validates back to the same spec
    assert spec == RunSpec.model_validate(document)
    assert RunSpec.model_validate(spec.model_dump(exclude_none=True)) == spec


@budget(20)
@given(run_documents())
def test_a_valid_document_parses_the_same_from_bytes(document: dict[str, Any]):
    assert parse_run_file(as_yaml(document).encode()) == parse_run_file(as_yaml(document))


# --- (b) no value with a character outside its pattern gets past validation -----------------

# Characters no patterned field allows: shell metacharacters, whitespace, non-ASCII, NUL.
FOREIGN = [
    ";",
    "|",
    "&",
    "$",
    "`",
    "'",
    '"',
    "\n",
    " ",
    "\t",
    "\r",
    "*",
    "(",
    "\\",
    "<",
    ">",
    "é",
    "\u202e",
    "😀",
    "\x00",
]
# An env value is any printable ASCII (it is always quoted); only these are foreign to it.
FOREIGN_TO_ENV_VALUES = ["\n", "\r", "\t", "é", "\u202e", "😀", "\x00", "\x7f", "\x1b"]

PATTERNED_FIELDS = [
    "name",
    "region",
    "capacity.reservation_id",
    "capacity.reservation_group_arn",
    "capacity.instance_type",
    "capacity.availability_zone",
    "network.vpc_cidr",
    "network.vpc_id",
    "network.public_subnet_id",
    "network.private_subnet_id",
    "storage.fsx.file_system_id",
    "storage.fsx.deployment_type",
    "storage.fsx.data_repository",
    "cluster.os",
    "cluster.head_node_instance_type",
    "cluster.custom_ami",
    "workload.source.git",
    "workload.source.ref",
    "workload.source.s3",
    "workload.workdir",
    "workload.dataset.source",
    "workload.dataset.path",
    "workload.max_runtime",
    "teardown.on_success",
    "teardown.on_failure",
]


def _parent(document: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    *parents, last = path.split(".")
    for part in parents:
        document = document[part]
    return document, last


def _spoil(value: str, character: str, position: int) -> str:
    position %= len(value) + 1
    return value[:position] + character + value[position:]


def _problems(document: dict[str, Any]) -> list[Problem]:
    with pytest.raises(RunSpecInvalid) as caught:
        parse_run_file(as_yaml(document))
    return caught.value.problems


@pytest.mark.parametrize("field", PATTERNED_FIELDS)
@budget(12)
@given(data=st.data())
def test_a_foreign_character_in_a_patterned_field_is_rejected_at_that_field(field: str, data: st.DataObject):
    # Given a valid document with one foreign character put anywhere into `field`
    document = copy.deepcopy(data.draw(run_documents(target=field), label="document"))
    parent, key = _parent(document, field)
    character = data.draw(st.sampled_from(FOREIGN), label="character")
    parent[key] = _spoil(parent[key], character, data.draw(st.integers(0, 4096), label="position"))
    # When it is parsed
    problems = _problems(document)
    # Then a problem names that field
    assert field in [path for path, *_ in problems], problems


@budget(30)
@given(data=st.data())
def test_a_foreign_character_in_an_env_name_is_rejected_at_that_name(data: st.DataObject):
    document = copy.deepcopy(data.draw(run_documents(target="workload.env"), label="document"))
    env = document["workload"]["env"]
    name = next(iter(env))
    character = data.draw(st.sampled_from([*FOREIGN, "-", "=", "."]), label="character")
    spoiled = _spoil(name, character, data.draw(st.integers(0, 128), label="position"))
    env[spoiled] = env.pop(name)
    assert f"workload.env.{spoiled}.[key]" in [path for path, *_ in _problems(document)]


@budget(30)
@given(data=st.data())
def test_a_foreign_character_in_an_env_value_is_rejected_at_that_variable(data: st.DataObject):
    document = copy.deepcopy(data.draw(run_documents(target="workload.env"), label="document"))
    env = document["workload"]["env"]
    name = next(iter(env))
    character = data.draw(st.sampled_from(FOREIGN_TO_ENV_VALUES), label="character")
    env[name] = _spoil(env[name], character, data.draw(st.integers(0, 64), label="position"))
    assert f"workload.env.{name}" in [path for path, *_ in _problems(document)]


@pytest.mark.parametrize("field", PATTERNED_FIELDS)
@budget(6)
@given(data=st.data())
def test_arbitrary_text_in_a_patterned_field_is_either_valid_or_rejected_at_that_field(field: str, data: st.DataObject):
    # Given a valid document whose `field` holds arbitrary text
    document = copy.deepcopy(data.draw(run_documents(target=field), label="document"))
    parent, key = _parent(document, field)
    parent[key] = data.draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=40), label="text")
    # When it is parsed, then it is valid, or a problem names that field (or, for a value that
    # is well-formed but clashes with another field, the model holding it)
    try:
        parse_run_file(as_yaml(document))
    except RunSpecInvalid as invalid:
        owner = field.rsplit(".", 1)[0]
        assert {field, owner} & {path for path, *_ in invalid.problems}, invalid.problems
