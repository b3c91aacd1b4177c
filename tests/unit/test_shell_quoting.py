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
from trainrun.logic import shell_quoting

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
    assert shlex.split(shell_quoting.join(values)) == values


@settings(max_examples=200)
@given(st.lists(any_text, max_size=8))
def test_joined_arbitrary_text_splits_back_into_the_same_argv(values: list[str]):
    assert shlex.split(shell_quoting.join(values)) == values


@settings(max_examples=200)
@given(any_text)
def test_a_quoted_value_is_one_word(value: str):
    assert shlex.split(shell_quoting.quote(value)) == [value]


@given(st.lists(field_values, max_size=4))
def test_a_command_line_is_the_program_then_its_quoted_arguments(values: list[str]):
    assert shell_quoting.join(["git", "checkout", *values]) == " ".join(
        ["git", "checkout", *map(shell_quoting.quote, values)]
    )


def _environment_seen_by_a_child(env: dict[str, str]) -> dict[str, str]:
    """What a child started as the head-node scripts start one (`env -- "${words[@]}" CHILD`) sees of `env`."""
    script = f'words=({shell_quoting.join(shell_quoting.env_words(env))})\nexec env -- "${{words[@]}}" env -0'
    completed = subprocess.run(
        ["bash", "--noprofile", "--norc", "-euc", script], capture_output=True, env={"LC_ALL": "C"}, check=True
    )
    child_env = dict(line.split("=", 1) for line in completed.stdout.decode("utf-8").split("\0") if line)
    return {name: child_env[name] for name in env if name in child_env}


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(env_names, env_values, min_size=1, max_size=6))
def test_a_child_sees_exactly_the_run_files_env_values(env: dict[str, str]):
    # Given valid run-file env values (quotes, $, backticks, ; and all)
    # When bash starts a child with them, as the prepare script and the job wrapper do
    seen = _environment_seen_by_a_child(env)
    # Then the child has exactly those values
    assert seen == env


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(env_names, any_text, min_size=1, max_size=4))
def test_a_child_sees_exactly_any_text_given_as_a_value(env: dict[str, str]):
    assert _environment_seen_by_a_child(env) == env


def test_env_words_are_one_name_value_word_per_variable():
    assert shell_quoting.env_words({"A": "1", "B": "it's = $x"}) == ["A=1", "B=it's = $x"]


def test_no_env_gives_no_words():
    assert shell_quoting.env_words({}) == []


@pytest.mark.parametrize("name", ["1A", "A B", "A;id", "A=B", "", "IFS", "_", "BASH_ENV", "Ä"])
def test_env_words_refuse_a_name_a_run_may_not_set(name: str):
    with pytest.raises(ValueError, match="is not an environment variable name a run may set"):
        shell_quoting.env_words({name: "x"})
