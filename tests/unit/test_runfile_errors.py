"""How a run file's problems are said: where each is (its line), the value, and the fix."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from trainrun.errors import WHOLE_FILE, Problem, RunSpecInvalid
from trainrun.model.run_file import PATTERN_WORDS, RunSpec, parse_run_file
from trainrun.model.spelling import closest

from .test_runfile import assert_problem, problems_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SINGLE_NODE = (EXAMPLES / "single-node.yaml").read_text()

VALID = """\
name: bert-phase1
region: us-west-2
capacity:
  reservation_id: cr-0123456789abcdef0
  instance_type: trn1.32xlarge
  nodes: 16
workload:
  source:
    git: https://github.com/aws-neuron/aws-neuron-samples.git
  train: ./train.sh
"""


def problem_at(problems: list[Problem], path: str) -> Problem:
    found = [problem for problem in problems if problem.path == path]
    assert len(found) == 1, problems
    return found[0]


# --- where ----------------------------------------------------------------------------------


def test_each_problem_names_the_line_and_column_of_its_value():
    problems = problems_of(VALID.replace("nodes: 16", "nodes: 0"))
    assert problem_at(problems, "capacity.nodes")[2:] == (6, 10)


def test_an_unknown_key_is_placed_at_the_key():
    problems = problems_of(VALID + "  colour: blue\n")
    assert problem_at(problems, "workload.colour")[2:] == (11, 3)


def test_a_missing_field_is_placed_at_its_parent():
    problems = problems_of(VALID.replace("  nodes: 16\n", ""))
    assert problem_at(problems, "capacity.nodes")[2:] == (3, 1)


def test_a_problem_of_an_environment_variable_name_is_placed_at_the_name():
    problems = problems_of(VALID + "  env:\n    SLURM_JOB_ID: '1'\n")
    assert problem_at(problems, "workload.env.SLURM_JOB_ID.[key]")[2:] == (12, 5)


def test_a_problem_of_the_whole_document_has_no_line():
    # Given a file whose aliases make it too large for the run record once expanded
    aliased = "  train: &t '" + "😀" * 16_000 + "'\n  setup: *t\n  compile: *t\n"
    problems = problems_of(VALID.replace("  train: ./train.sh\n", aliased))
    assert [(problem.path, problem.line) for problem in problems] == [(WHOLE_FILE, None)]
    assert "once stored in the run record" in problems[0].message


def test_the_problem_says_its_line_when_printed_as_the_lambda_and_the_findings_do():
    assert str(Problem("capacity.nodes", "0 is too small", 6, 10)) == "capacity.nodes (line 6): 0 is too small"
    assert str(Problem(WHOLE_FILE, "indented with a tab", 4, 1)) == "line 4: indented with a tab"
    assert str(Problem(WHOLE_FILE, "is 300000 bytes")) == "(file): is 300000 bytes"


# --- the value and the fix ------------------------------------------------------------------


def test_a_quoted_number_says_remove_the_quotes():
    problems = problems_of(VALID.replace("nodes: 16", 'nodes: "16"'))
    assert problem_at(problems, "capacity.nodes").message == (
        "'16' is text, because of its quotes, not a whole number: remove the quotes (nodes: 16)"
    )


def test_an_unquoted_number_as_an_environment_value_says_quote_it_as_written():
    problems = problems_of(VALID + "  env:\n    NEURON_RT_EXEC_TIMEOUT: 0600\n")
    # YAML reads 0600 as the octal 384: the fix keeps what was written
    assert problem_at(problems, "workload.env.NEURON_RT_EXEC_TIMEOUT").message == (
        '0600 is read as a number, not text: quote it (NEURON_RT_EXEC_TIMEOUT: "0600")'
    )


@pytest.mark.parametrize(
    ("typo", "meant", "line"),
    [("  node: 16", "nodes", 6), ("  instance_typ: trn1.32xlarge", "instance_type", 5)],
)
def test_a_mistyped_key_says_did_you_mean_and_the_field_is_not_also_missing(typo: str, meant: str, line: int):
    text = re.sub(rf"  {meant}: .*", typo, VALID)
    problems = problems_of(text)
    typed = typo.split(":")[0].strip()
    assert problem_at(problems, f"capacity.{typed}") == Problem(
        f"capacity.{typed}", f"is not a known field; did you mean {meant!r}?", line, 3
    )
    assert [problem.path for problem in problems] == [f"capacity.{typed}"]


def test_a_mistyped_top_level_key_says_did_you_mean():
    problems = problems_of(VALID.replace("workload:", "workloads:"))
    assert [(problem.path, problem.message) for problem in problems] == [
        ("workloads", "is not a known field; did you mean 'workload'?")
    ]


def test_an_unknown_key_like_no_field_says_only_that_it_is_unknown():
    problems = problems_of(VALID + "priority: high\n")
    assert problem_at(problems, "priority").message == "is not a known field"


@pytest.mark.parametrize(("written", "meant"), [("Delete", "delete"), ("kep", "keep")])
def test_a_mistyped_choice_says_did_you_mean(written: str, meant: str):
    problems = problems_of(VALID + f"teardown:\n  on_success: {written}\n")
    assert_problem(problems, "teardown.on_success", f"is not one of 'delete' or 'keep'; did you mean {meant!r}?")


def test_a_pattern_is_said_in_words_with_an_example():
    problems = problems_of(VALID + "  max_runtime: 30 minutes\n")
    assert problem_at(problems, "workload.max_runtime").message == (
        "'30 minutes' is not a number and a unit (s, m, h or d), e.g. 30m"
    )


def _schema_patterns(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        found = {schema["pattern"]} if isinstance(schema.get("pattern"), str) else set()
        return found.union(*(_schema_patterns(value) for value in schema.values()))
    if isinstance(schema, list):
        return set().union(*(_schema_patterns(value) for value in schema))
    return set()


def test_every_pattern_of_the_run_file_is_said_in_words():
    assert _schema_patterns(RunSpec.model_json_schema()) <= set(PATTERN_WORDS)


@pytest.mark.parametrize("pattern", sorted(PATTERN_WORDS))
def test_the_example_of_each_pattern_matches_it(pattern: str):
    _, example = PATTERN_WORDS[pattern]
    assert re.fullmatch(pattern, example)


# --- the file itself: syntax errors and tabs -------------------------------------------------


def test_a_syntax_error_gives_its_line_and_column():
    problems = problems_of(VALID.replace("nodes: 16", "nodes: 16: 3"))
    assert problems == [Problem(WHOLE_FILE, "is not valid YAML: mapping values are not allowed here", 6, 12)]


def test_an_unclosed_quote_is_placed_where_it_opens():
    (problem,) = problems_of(VALID.replace("name: bert-phase1", "name: 'bert-phase1"))
    assert problem.message.startswith("is not valid YAML: found unexpected end of stream while scanning a quoted")
    assert (problem.line, problem.column) == (1, 7)


def test_a_syntax_error_begun_elsewhere_says_where():
    (problem,) = problems_of(VALID.replace("region: us-west-2", "region: [us-west-2"))
    assert "while parsing a flow sequence at line 2, column 9" in problem.message


def test_a_duplicate_key_gives_its_line():
    (problem,) = problems_of(VALID + "name: again\n")
    assert (problem.message, problem.line) == ("is not valid YAML: duplicate key 'name'", 11)


@pytest.mark.parametrize("indent", ["  ", "    "])
def test_a_tab_in_an_indentation_is_reported_and_the_rest_of_the_file_still_checked(indent: str):
    # Given a file indented by `indent`, one line of it with a tab instead, and a bad value elsewhere
    text = VALID.replace("  ", indent).replace(f"{indent}instance_type", "\tinstance_type")
    text = text.replace("nodes: 16", "nodes: 0")
    # When it is parsed
    problems = problems_of(text)
    # Then the tab is reported at its line and column, and so is the bad value
    tab = Problem(WHOLE_FILE, "", 5, 1)
    assert [(problem.path, problem.line, problem.column) for problem in problems] == [
        (tab.path, tab.line, tab.column),
        ("capacity.nodes", 6, len(indent) + 8),
    ]
    assert problems[0].message.startswith(
        "indented with a tab; YAML indents with spaces only: replace the tab with spaces (read here as"
    )


def test_a_tab_in_a_file_otherwise_valid_still_makes_it_invalid():
    with pytest.raises(RunSpecInvalid) as caught:
        parse_run_file(VALID.replace("  nodes", "\tnodes"))
    assert [(problem.path, problem.line) for problem in caught.value.problems] == [(WHOLE_FILE, 6)]


def test_a_tab_inside_a_commands_text_is_the_commands_own_and_not_reported():
    # Given a tab-indented key, and a block scalar whose text has a tab after its indentation
    block = "  train: |\n    for x in 1 2; do\n    \techo $x\n    done\n"
    text = VALID.replace("  train: ./train.sh\n", block).replace("  nodes", "\tnodes")
    # Then only the key's line is reported
    problems = problems_of(text)
    assert [(problem.path, problem.line) for problem in problems] == [(WHOLE_FILE, 6)]


def test_a_tab_then_another_syntax_error_reports_both():
    text = VALID.replace("  nodes", "\tnodes").replace("train: ./train.sh", "train: [./train.sh")
    tab, syntax = problems_of(text)
    assert (tab.path, tab.line) == (WHOLE_FILE, 6) and tab.message.startswith("indented with a tab")
    assert (syntax.path, syntax.line) == (WHOLE_FILE, 11) and syntax.message.startswith("is not valid YAML: ")


def test_a_tab_after_a_key_is_a_syntax_error_saying_to_replace_it():
    (problem,) = problems_of(VALID.replace("nodes: 16", "nodes:\t16"))
    assert problem == Problem(
        WHOLE_FILE,
        "is not valid YAML: a tab where a key or a value should start; YAML separates with spaces only: "
        "replace the tab with a space",
        6,
        9,
    )


# --- the five commonest mistakes at once -----------------------------------------------------


def test_the_five_commonest_mistakes_are_reported_at_once_each_with_its_line_value_and_fix():
    text = (
        VALID.replace("nodes: 16", 'nodes: "16"')
        .replace("instance_type: trn1.32xlarge", "instance_type: trn1.32xl")
        .replace("region:", "regoin:")
        .replace("  source:", "\tsource:")
        + "  env:\n    NEURON_RT_EXEC_TIMEOUT: 600\n"
    )
    problems = problems_of(text)
    # (in the order of the file)
    assert [(problem.path, problem.line) for problem in problems] == [
        ("regoin", 2),
        ("capacity.instance_type", 5),
        ("capacity.nodes", 6),
        (WHOLE_FILE, 8),
        ("workload.env.NEURON_RT_EXEC_TIMEOUT", 12),
    ]
    fixes = [problem.message for problem in problems]
    assert fixes[0] == "is not a known field; did you mean 'region'?"
    assert "did you mean 'trn1.32xlarge'?" in fixes[1]
    assert "remove the quotes (nodes: 16)" in fixes[2]
    assert "replace the tab with spaces" in fixes[3]
    assert 'quote it (NEURON_RT_EXEC_TIMEOUT: "600")' in fixes[4]


# --- the closest name -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "meant"),
    [("TRN1.32XLARGE", "trn1.32xlarge"), ("trn1.32xl", "trn1.32xlarge"), ("node", "nodes"), ("Trian", "Train")],
)
def test_closest_finds_the_name_meant_whatever_its_case(value: str, meant: str):
    assert closest(value, ["trn1.32xlarge", "trn1n.32xlarge", "nodes", "Train", "Check train"]) == meant


def test_closest_finds_nothing_when_no_name_is_close():
    assert closest("priority", ["nodes", "instance_type", "reservation_id"]) is None


# --- workload.progress_pattern --------------------------------------------------------------


def test_a_progress_pattern_with_an_unknown_group_names_the_field_the_value_and_the_groups_it_may_have() -> None:
    # Given a pattern whose loss group is misspelt
    text = VALID + "  progress_pattern: 'it=(?P<step>\\d+) obj=(?P<lss>\\S+)'\n"
    # When the run file is read, Then the problem names the field, the value and the allowed groups
    problem = problem_at(problems_of(text), "workload.progress_pattern")
    assert "(?P<lss>" in problem.message
    assert "the named groups it may have are step, epoch, loss, learning_rate, throughput, grad_norm" in problem.message


def test_a_progress_pattern_that_does_not_compile_is_refused_before_anything_is_created() -> None:
    problem = problem_at(problems_of(VALID + "  progress_pattern: '(?P<step>\\d+'\n"), "workload.progress_pattern")
    assert "is not a Python regular expression" in problem.message


def test_a_usable_progress_pattern_is_kept() -> None:
    spec = parse_run_file(VALID + "  progress_pattern: 'it=(?P<step>\\d+) obj=(?P<loss>\\S+)'\n")
    assert spec.workload.progress_pattern == r"it=(?P<step>\d+) obj=(?P<loss>\S+)"
