"""Hostile run files: each is refused by the run file model, at its field, before anything exists.

Control characters in shell fields, refs git refuses, integers too long for Python's int(),
environment names that break the job, and content too large for the run record.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from trainrun.errors import RunSpecInvalid
from trainrun.model.findings import Code, Severity
from trainrun.model.record_size import MAX_SPEC_BYTES, encode_json
from trainrun.model.run_file import (
    GIT_REF,
    MAX_RUN_FILE_BYTES,
    environment_findings,
    git_ref_format_problem,
    parse_run_file,
)

from .test_runfile import assert_problem, parse, problems_of, valid_document, with_value

SHELL_FIELDS = ("workload.setup", "workload.compile", "workload.train")


def as_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


# --- control characters in shell fields ---------------------------------------------------------


@pytest.mark.parametrize("field", SHELL_FIELDS)
@pytest.mark.parametrize("character", ["\x00", "\x01", "\x08", "\x0b", "\x0c", "\r", "\x1b", "\x7f"])
def test_a_control_character_in_a_shell_field_is_refused_at_that_field(field: str, character: str):
    # Given a shell field whose second line holds a control character
    document = with_value(field, f"echo start\necho a{character}b")
    # When it is validated, then the field is named with the character, its line and the fix
    problems = problems_of(document)
    assert_problem(problems, field, f"U+{ord(character):04X}) on line 2 of the command")
    assert_problem(problems, field, "remove it")


@pytest.mark.parametrize("field", SHELL_FIELDS)
def test_a_nul_written_as_a_yaml_escape_is_refused(field: str):
    # Given a run file that spells NUL as YAML's "\0" escape
    key = field.rsplit(".", 1)[1]
    text = as_yaml(with_value(field, "PLACEHOLDER")).replace("PLACEHOLDER", '"python3 train.py\\0 --steps 1"')
    assert f'{key}: "python3 train.py\\0' in text
    # When it is validated, then the field is refused
    assert_problem(problems_of(text), field, "U+0000")


def test_tab_newline_and_non_ascii_text_are_kept_in_a_shell_field():
    command = 'for i in 1 2; do\n\techo "pas $i" é 😀\ndone'
    assert parse(with_value("workload.train", command)).workload.train == command


# --- git refs ------------------------------------------------------------------------------------

REFS_GIT_REFUSES = [
    "..",
    ".",
    "a/../..",
    "main..",
    "main..dev",
    "a@{1}",
    "main.lock",
    "feature/x.lock",
    "a//b",
    "a/",
    "main.",
    ".hidden",
    "a/.b",
    "@",
    "a b",
    "a~1",
    "a^",
    "a:b",
    "a?",
    "a*",
    "a[",
    "a\\b",
    "a\x01b",
    "a\x7fb",
]


@pytest.mark.parametrize("ref", REFS_GIT_REFUSES)
def test_a_ref_git_refuses_is_refused_at_workload_source_ref(ref: str):
    problems = problems_of(with_value("workload.source.ref", ref))
    assert any(path == "workload.source.ref" for path, *_ in problems), problems


@pytest.mark.parametrize("ref", REFS_GIT_REFUSES)
def test_git_itself_refuses_each_of_those_refs(ref: str):
    # The list above is what the real git refuses, not what we believe it refuses.
    assert not git_accepts(ref)


@pytest.mark.parametrize("ref", ["-main", "--upload-pack=x"])
def test_a_ref_starting_with_a_dash_is_refused(ref: str):
    assert_problem(
        problems_of(with_value("workload.source.ref", ref)), "workload.source.ref", "is not a branch, tag or commit"
    )


@pytest.mark.parametrize("ref", ["main", "master", "v1.2.3", "feature/x", "release-1.0", "a.b/c_d", "0123abc"])
def test_a_ref_git_accepts_is_kept(ref: str):
    assert parse(with_value("workload.source.ref", ref)).workload.source.ref == ref


def git_accepts(ref: str) -> bool:
    """What the real `git check-ref-format --allow-onelevel` says of `ref`."""
    result = subprocess.run(
        ["git", "check-ref-format", "--allow-onelevel", ref], capture_output=True, check=False, timeout=30
    )
    return result.returncode == 0


# Characters git gives a meaning to in refs, and a few ordinary ones, so that short random refs
# hit every rule (and the combinations '..', '@{', '.lock', '//').
REF_ALPHABET = st.sampled_from([*"a.b/@{}-lock~^:?*[\\ _", "\x01", "\x7f", "\t", "é"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(REF_ALPHABET, max_size=12))
def test_the_ref_rules_agree_with_git_check_ref_format(ref: str):
    # A leading '-' would be read as an option by check-ref-format (trainrun refuses it anyway).
    assume(not ref.startswith("-"))
    assert (git_ref_format_problem(ref) is None) == git_accepts(ref), git_ref_format_problem(ref)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.from_regex(GIT_REF, fullmatch=True))
def test_every_ref_the_run_file_accepts_is_accepted_by_git(ref: str):
    try:
        spec = parse(with_value("workload.source.ref", ref))
    except RunSpecInvalid:
        return
    assert spec.workload.source.ref is not None
    assert git_accepts(spec.workload.source.ref)


# --- integers too long for int() -------------------------------------------------------------

HUGE = "9" * 5000


@pytest.mark.parametrize(
    "field",
    [
        "capacity.nodes",
        "workload.total_steps",
        "storage.fsx.storage_capacity_gib",
        "storage.fsx.throughput_per_tib",
        "name",
        "workload.train",
        "workload.env.HUGE",
        "teardown.keep_file_system",
    ],
)
def test_a_5000_digit_integer_is_an_invalid_field_not_a_crash(field: str):
    # Given a field holding a 5,000-digit integer (Python's int() refuses more than 4,300 digits)
    text = as_yaml(with_value(field, "PLACEHOLDER")).replace("PLACEHOLDER", HUGE)
    # When it is validated, then that field is named, with what is wrong and the fix
    assert_problem(problems_of(text), field, "is an integer of 5000 characters")


@pytest.mark.parametrize(
    "literal", [HUGE, "-" + HUGE, "0x" + "f" * 5000, "0" + "7" * 5000, "0b" + "1" * 5000, "1_" * 2500 + "1"]
)
def test_every_yaml_spelling_of_a_huge_integer_is_an_invalid_field(literal: str):
    text = as_yaml(with_value("capacity.nodes", "PLACEHOLDER")).replace("PLACEHOLDER", literal)
    assert_problem(problems_of(text), "capacity.nodes", "is an integer of")


def test_a_huge_integer_in_an_unknown_field_is_an_unknown_field():
    text = as_yaml(valid_document()) + f"extra: {HUGE}\n"
    assert_problem(problems_of(text), "extra", "is not a known field")


@pytest.mark.parametrize("where", ["list item", "flow key", "document"])
def test_a_huge_integer_anywhere_in_the_yaml_is_reported_not_raised(where: str):
    text = {
        "list item": as_yaml(with_value("workload.env", "PLACEHOLDER")).replace("PLACEHOLDER", f"[1, {HUGE}]"),
        "flow key": as_yaml(with_value("workload.env", "PLACEHOLDER")).replace("PLACEHOLDER", f"{{? {HUGE} : x}}"),
        "document": HUGE,
    }[where]
    with pytest.raises(RunSpecInvalid):
        parse_run_file(text)


def test_an_integer_of_32_digits_is_still_an_integer():
    text = as_yaml(with_value("capacity.nodes", "PLACEHOLDER")).replace("PLACEHOLDER", "1" * 32)
    assert_problem(problems_of(text), "capacity.nodes", f"{'1' * 32} is too large: the most is 128")


# --- environment names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "LD_PRELOAD",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "PWD",
        "SLURM_JOB_ID",
        "SLURM_NTASKS",
        "SRUN_CPUS_PER_TASK",
        "TRAINRUN_JOB_SECRET",
    ],
)
def test_an_environment_name_that_breaks_the_job_is_refused_with_the_reason(name: str):
    problems = problems_of(with_value("workload.env", {name: "x"}))
    assert_problem(problems, f"workload.env.{name}.[key]", f"{name!r} cannot be set by a run: ")


def test_the_local_stand_in_workloads_settings_may_be_set():
    env = {"TRAINRUN_LOCAL_STEP_SECONDS": "0.1", "TRAINRUN_LOCAL_CRASH_AT_STEP": "20"}
    assert parse(with_value("workload.env", env)).workload.env == env


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LD_LIBRARY_PATH", "/opt/lib"),
        ("PYTHONPATH", "/fsx/lib"),
        ("NEURON_RT_VISIBLE_CORES", "0-1"),
        ("NEURON_RT_NUM_CORES", "2"),
        ("NEURON_RT_ROOT_COMM_ID", "10.0.0.1:62182"),
        ("FI_PROVIDER", "tcp"),
    ],
)
def test_a_risky_environment_name_is_a_warning_naming_it(name: str, value: str):
    spec = parse(with_value("workload.env", {name: value}))
    findings = environment_findings(spec)
    assert [(f.code, f.severity) for f in findings] == [(Code.ENVIRONMENT_VARIABLE_RISKY, Severity.WARNING)]
    assert findings[0].message.startswith(f"workload.env.{name}: ")


def test_the_neuron_and_efa_settings_of_the_neuron_guides_give_no_finding():
    env = {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
        "NEURON_RT_LOG_LEVEL": "INFO",
        "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1",
        "NEURON_CC_FLAGS": "--model-type=transformer",
        "XLA_USE_BF16": "1",
    }
    assert environment_findings(parse(with_value("workload.env", env))) == []


# --- what the run record can hold ---------------------------------------------------------------


def test_content_too_large_for_the_run_record_is_refused_even_from_a_small_file():
    # Given a 70 KB file whose one 64 KB command is used three times through YAML aliases
    command = "echo " + "😀" * 16_000
    text = as_yaml(valid_document()).replace(
        "train: ./train.sh", f"setup: &cmd '{command}'\n  compile: *cmd\n  train: *cmd"
    )
    assert len(text.encode()) < 70_000
    # When it is validated, then the file is refused with the stored size, the limit and the fix
    assert_problem(problems_of(text), "(file)", "once stored in the run record (as UTF-8 JSON, with aliases")
    assert_problem(problems_of(text), "(file)", f"at most {MAX_SPEC_BYTES}: shorten workload.setup")


def test_content_within_the_run_record_budget_is_accepted_at_its_stored_size():
    # Given commands of non-ASCII text that stores in just under the budget
    command = "é" * 16_000
    spec = parse(
        with_value(
            "workload.setup", command, with_value("workload.compile", command, with_value("workload.train", command))
        )
    )
    size = len(encode_json(spec.model_dump(mode="json", exclude_none=True)).encode())
    assert 96_000 <= size <= MAX_SPEC_BYTES


def test_the_error_of_a_file_with_thousands_of_problems_names_the_first_and_counts_the_rest():
    # The error's message travels in the workflow's state (256 KB at most); the problems are all kept
    text = as_yaml(valid_document()) + "".join(f"u{i}: {'x' * 900}\n" for i in range(10_000))
    with pytest.raises(RunSpecInvalid) as caught:
        parse_run_file(text[:MAX_RUN_FILE_BYTES])
    invalid = caught.value
    assert len(invalid.problems) > 200
    assert str(invalid).startswith("u0 (line 13): is not a known field; u1 (line 14): ")
    assert str(invalid).endswith(f"; and {len(invalid.problems) - 20} more problems")
    assert len(str(invalid)) < 12_000
