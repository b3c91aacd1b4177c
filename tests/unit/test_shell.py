"""Command-line text: whatever a value holds, the shell reads back exactly that value."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_runfile_properties import (
    durations,
    env_names,
    env_values,
    file_system_ids,
    fsx_paths,
    git_refs,
    git_urls,
    head_node_instance_types,
    names,
    regions,
    reservation_ids,
    s3_archives,
    s3_uris,
    subnet_ids,
    vpc_ids,
    workdirs,
)
from trainrun.logic import shell

field_values = st.one_of(
    names,
    regions,
    reservation_ids,
    vpc_ids,
    subnet_ids,
    file_system_ids,
    s3_uris,
    s3_archives,
    git_urls,
    git_refs,
    workdirs,
    fsx_paths,
    env_names,
    env_values,
    head_node_instance_types,
    durations,
)
# Anything a str can hold except NUL, which no argv or shell variable can carry.
any_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"))


@settings(max_examples=200)
@given(st.lists(field_values, max_size=8))
def test_joined_field_values_split_back_into_the_same_argv(values: list[str]):
    assert shlex.split(shell.join(values)) == values


@settings(max_examples=200)
@given(st.lists(any_text, max_size=8))
def test_joined_arbitrary_text_splits_back_into_the_same_argv(values: list[str]):
    assert shlex.split(shell.join(values)) == values


@settings(max_examples=200)
@given(any_text)
def test_a_quoted_value_is_one_word(value: str):
    assert shlex.split(shell.quote(value)) == [value]


@given(st.lists(field_values, max_size=4))
def test_a_command_line_is_the_program_then_its_quoted_arguments(values: list[str]):
    assert shell.join(["git", "checkout", *values]) == " ".join(["git", "checkout", *map(shell.quote, values)])


def _values_seen_by_bash(script: str, names: list[str]) -> list[str]:
    printed = " ".join(f'"${{{name}}}"' for name in names)
    completed = subprocess.run(
        ["bash", "--noprofile", "--norc", "-euc", f"{script}printf '%s\\0' {printed}"],
        capture_output=True,
        env={"LC_ALL": "C"},
        check=True,
    )
    return completed.stdout.decode("utf-8").split("\0")[:-1] if names else []


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(env_names, env_values, min_size=1, max_size=6))
def test_bash_reads_back_exactly_the_run_files_env_values(env: dict[str, str]):
    # Given valid run-file env values (quotes, $, backticks, ; and all)
    # When bash runs the assignments and prints the variables
    seen = _values_seen_by_bash(shell.env_assignments(env), list(env))
    # Then it prints exactly those values
    assert seen == list(env.values())


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(env_names, any_text, min_size=1, max_size=4))
def test_bash_reads_back_exactly_any_text_given_as_a_value(env: dict[str, str]):
    assert _values_seen_by_bash(shell.env_assignments(env), list(env)) == list(env.values())


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(env_names, env_values, min_size=1, max_size=4))
def test_exported_values_reach_a_child_process(env: dict[str, str]):
    script = shell.env_assignments(env) + "exec env -0"
    completed = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, env={}, check=True)
    child_env = dict(line.split("=", 1) for line in completed.stdout.decode().split("\0") if line)
    assert {name: child_env[name] for name in env} == env


def test_env_assignments_are_one_export_per_line():
    assert shell.env_assignments({"A": "1", "B": "it's"}) == "export A=1\nexport B='it'\"'\"'s'\n"


def test_no_env_gives_no_assignments():
    assert shell.env_assignments({}) == ""


@pytest.mark.parametrize("name", ["1A", "A B", "A;id", "A=B", "", "IFS", "_", "BASH_ENV", "Ä"])
def test_env_assignments_refuse_a_name_a_run_may_not_set(name: str):
    with pytest.raises(ValueError, match="is not an environment variable name a run may set"):
        shell.env_assignments({name: "x"})
