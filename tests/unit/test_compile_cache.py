"""The Neuron compile cache: the run file's choice, the location and permissions it gives the
jobs, and what the job logs say of it (trainrun.logic.compile_cache, trainrun.logic.job_log)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.errors import RunSpecInvalid
from trainrun.logic.allowlists import RunAllowLists, check_allowed
from trainrun.logic.cluster_config import cache_s3_access
from trainrun.logic.compile_cache import cache_url
from trainrun.logic.job_log import (
    CACHED_FAILED_NEFF,
    MAX_CACHE_NEFFS,
    CacheEvent,
    JobLogSummary,
    parse_line,
    render_text,
)
from trainrun.model.findings import Code
from trainrun.model.jobs import JobProgress
from trainrun.model.run_file import RunSpec, parse_run_file
from trainrun.ops.views import RunProgress

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "joblogs"
CONFIG = "trainrun-config-123456789012"
RUN_FILE = {
    "name": "bert",
    "capacity": {"reservation_id": "cr-0123456789abcdef0", "instance_type": "trn1.32xlarge", "nodes": 2},
    "workload": {"source": {"git": "https://github.com/aws-neuron/aws-neuron-samples.git"}, "train": "./train.sh"},
}


def run_file(compile_cache: Any = None, *, text: str | None = None) -> RunSpec:
    document = copy.deepcopy(RUN_FILE)
    if compile_cache is not None:
        document["workload"]["compile_cache"] = compile_cache
    return parse_run_file(text if text is not None else yaml.safe_dump(document))


def problem(compile_cache: Any) -> str:
    with pytest.raises(RunSpecInvalid) as caught:
        run_file(compile_cache)
    [found] = caught.value.problems
    assert found.path == "workload.compile_cache"
    return found.message


# --- the run file ----------------------------------------------------------------------------


def test_without_the_field_the_jobs_use_the_stacks_cache_for_the_instance_type() -> None:
    assert cache_url(run_file(), CONFIG) == f"s3://{CONFIG}/neuron-compile-cache/trn1.32xlarge/"


def test_a_prefix_of_the_runs_own_is_the_cache_with_or_without_its_slash() -> None:
    assert cache_url(run_file("s3://team-cache/bert"), CONFIG) == "s3://team-cache/bert/"
    assert cache_url(run_file("s3://team-cache/bert/"), CONFIG) == "s3://team-cache/bert/"


@pytest.mark.parametrize("written", ["off", "'off'", "false"])
def test_off_written_plainly_quoted_or_as_false_turns_the_cache_off(written: str) -> None:
    # YAML 1.1 (PyYAML) reads a plain `off` as the boolean false: it means off all the same
    text = yaml.safe_dump(RUN_FILE).replace("  train: ./train.sh", f"  train: ./train.sh\n  compile_cache: {written}")
    spec = run_file(text=text)
    assert spec.workload.compile_cache == "off"
    assert cache_url(spec, CONFIG) is None
    assert cache_s3_access(spec, CONFIG) == []


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("/fsx/neuron-cache", "'/fsx/neuron-cache' is neither off nor an S3 URI"),
        ("s3://Bad_Bucket/x", "'s3://Bad_Bucket/x' is neither off nor an S3 URI"),
        ("on", "'on' is neither off nor an S3 URI"),
        (True, "true is not a cache location"),
        (3, "3 is not text"),
    ],
)
def test_anything_else_is_refused_with_the_field_the_value_and_the_fix(value: Any, says: str) -> None:
    message = problem(value)
    assert says in message
    assert "give off, or the S3 prefix of a cache (s3://my-bucket/neuron-compile-cache/)" in message


def test_the_run_may_not_set_the_cache_variable_itself() -> None:
    document = copy.deepcopy(RUN_FILE)
    document["workload"]["env"] = {"NEURON_COMPILE_CACHE_URL": "s3://elsewhere/cache/"}
    with pytest.raises(RunSpecInvalid) as caught:
        parse_run_file(yaml.safe_dump(document))
    [found] = caught.value.problems
    assert found.path.startswith("workload.env")
    assert "workload.compile_cache" in found.message


# --- where the cache may be, and what the nodes may do there ----------------------------------


def allow(buckets: str = "") -> RunAllowLists:
    return RunAllowLists.from_parameters(config_bucket=CONFIG, bucket_arns=buckets, topic_arns="")


def test_a_cache_in_a_bucket_the_stack_does_not_allow_is_refused() -> None:
    findings = check_allowed(run_file("s3://team-cache/bert/"), allow())
    assert [f.code for f in findings] == [Code.BUCKET_NOT_ALLOWED]
    assert findings[0].message.startswith("workload.compile_cache: bucket 'team-cache'")
    assert check_allowed(run_file("s3://team-cache/bert/"), allow("arn:aws:s3:::team-cache")) == []


def test_in_the_config_bucket_a_cache_must_be_among_the_stacks_caches() -> None:
    # Anywhere else the nodes could overwrite run files or trainrun's Neuron install script
    for elsewhere in (f"s3://{CONFIG}/runs/", f"s3://{CONFIG}/cluster-scripts/", f"s3://{CONFIG}"):
        [finding] = check_allowed(run_file(elsewhere), allow())
        assert finding.code == Code.CONFIG_BUCKET_RUN_FILES
        assert "neuron-compile-cache/" in finding.message
    assert check_allowed(run_file(f"s3://{CONFIG}/neuron-compile-cache/shared/"), allow()) == []


def test_the_nodes_may_read_and_write_the_caches_objects_and_nothing_else_of_the_config_bucket() -> None:
    # The listing of the stack's caches is ClusterNodePolicy's (template.yaml), under neuron-compile-cache/ only
    assert cache_s3_access(run_file(), CONFIG) == [
        {"BucketName": CONFIG, "KeyName": "neuron-compile-cache/trn1.32xlarge/*", "EnableWriteAccess": True}
    ]


def test_a_cache_in_another_bucket_is_listed_and_read_as_that_bucket_and_written_under_its_prefix() -> None:
    # Given a cache in a bucket of RunBucketArns: the compiler lists it (s3:ListBucket on the bucket),
    # which ParallelCluster's S3Access grants only with the whole bucket, read only
    assert cache_s3_access(run_file("s3://team-cache/neuron/"), CONFIG) == [
        {"BucketName": "team-cache"},
        {"BucketName": "team-cache", "KeyName": "neuron/*", "EnableWriteAccess": True},
    ]
    assert cache_s3_access(run_file("s3://team-cache"), CONFIG) == [
        {"BucketName": "team-cache"},
        {"BucketName": "team-cache", "KeyName": "*", "EnableWriteAccess": True},
    ]


# --- the compiler's cache lines ---------------------------------------------------------------

HIT_NCC = (
    "2023-08-25 21:52:23.000453: INFO ||NCC_WRAPPER||: Using a cached neff at /var/tmp/neuron-compile-cache/"
    "neuronxcc-2.8.0.25+a3ad0f342/MODULE_198775565831884870+d41d8cd9/model.neff. "
    "Exiting with a successfully compiled graph."
)
HIT_NEURON_CC = (
    "2024-09-23 00:09:00.000437:  27  INFO ||NEURON_CC_WRAPPER||: Using a cached neff at /work-dir/neuron-cache/"
    "neuronxcc-2.14.227.0+2d4f85be/MODULE_b100285780ea94e4e6ea+2c2d707e/model.neff. "
    "Exiting with a successfully compiled graph."
)
FAILED_NEFF = (
    "INFO ||NCC_WRAPPER||: Got a cached failed neff at /var/tmp/neuron-compile-cache/neuronxcc-2.8.0.25+a3ad0f342/"
    "MODULE_12486829708343293975+d41d8cd9/model.neff. Will skip compilation, please set --retry_failed_compilation "
    "for recompilation. "
)


@pytest.mark.parametrize(
    ("line", "outcome", "tag", "module"),
    [
        (HIT_NCC, "hit", "NCC_WRAPPER", "MODULE_198775565831884870+d41d8cd9"),
        (HIT_NEURON_CC, "hit", "NEURON_CC_WRAPPER", "MODULE_b100285780ea94e4e6ea+2c2d707e"),
        ("3: " + HIT_NEURON_CC, "hit", "NEURON_CC_WRAPPER", "MODULE_b100285780ea94e4e6ea+2c2d707e"),
        (FAILED_NEFF, "failed", "NCC_WRAPPER", "MODULE_12486829708343293975+d41d8cd9"),
    ],
)
def test_the_compiler_wrappers_cache_lines_with_either_tag(line: str, outcome: str, tag: str, module: str) -> None:
    event = parse_line(line)
    assert isinstance(event, CacheEvent)
    assert (event.outcome, event.tag) == (outcome, tag)
    assert event.neff.endswith(f"/{module}/model.neff")


@pytest.mark.parametrize(
    "line",
    [
        "2023-08-25 21:52:23.000451: INFO ||NCC_WRAPPER||: Compile cache path: /var/tmp/neuron-compile-cache",
        "INFO ||NEURON_CC_WRAPPER||: Extracting graphs (/fsx/c/MODULE_1+abb26765/model.hlo.pb) for ahead-of-time "
        "parallel compilation. No compilation was done.",
        "echo Using a cached neff at /x/model.neff",  # no compiler wrapper's tag
    ],
)
def test_other_lines_of_the_compiler_are_not_cache_lines(line: str) -> None:
    assert not isinstance(parse_line(line), CacheEvent)


def test_a_graph_is_counted_once_whatever_the_ranks_and_nodes_that_print_it() -> None:
    summary = JobLogSummary().feed_lines([HIT_NCC, HIT_NCC, "0: " + HIT_NCC, HIT_NEURON_CC])
    assert len(summary.cache_hits) == 2
    assert summary.to_json()["cache"] == {"hits": 2, "failed": 0}
    assert not summary.failed


def test_a_cached_failed_neff_is_a_failure_that_says_the_fix() -> None:
    summary = JobLogSummary().feed_lines([HIT_NCC, FAILED_NEFF])
    assert summary.to_json()["cache"] == {"hits": 1, "failed": 1}
    assert summary.failures == [CACHED_FAILED_NEFF]
    assert summary.first_failure is not None and "--retry_failed_compilation" in summary.first_failure
    assert summary.failed


def test_parse_log_says_what_the_job_found_in_the_cache() -> None:
    summary = JobLogSummary().feed_lines([HIT_NCC, HIT_NEURON_CC, FAILED_NEFF])
    assert "compile cache: 2 graphs found, 1 found as failed" in render_text(summary)


def test_the_distinct_neffs_counted_are_bounded() -> None:
    lines = [f"INFO ||NCC_WRAPPER||: Using a cached neff at /c/MODULE_{n}+d41d8cd9/model.neff." for n in range(600)]
    assert len(JobLogSummary().feed_lines(lines).cache_hits) == MAX_CACHE_NEFFS


def test_a_second_compile_that_finds_every_graph_reports_them_as_cache_hits() -> None:
    # Given the real-format output of a two-worker compile whose graphs were all in the S3 cache
    summary = JobLogSummary().feed_lines((FIXTURES / "compile_bert_cached.out").read_text().splitlines())
    # Then each graph is a hit once, and none was compiled
    progress = JobProgress(
        compile_graphs=summary.compile.graphs if summary.compile else None,
        compile_succeeded=summary.compile.succeeded if summary.compile else None,
        cache_hit_neffs=sorted(summary.cache_hits),
    )
    compiled = RunProgress.of(progress, None).compile
    assert compiled is not None
    assert (compiled.graphs, compiled.cache_hits, compiled.compiled) == (2, 2, 0)


def test_a_first_compile_reports_no_cache_hits() -> None:
    summary = JobLogSummary().feed_lines((FIXTURES / "compile_bert_ok.out").read_text().splitlines())
    progress = JobProgress(compile_graphs=2, compile_succeeded=2, cache_hit_neffs=sorted(summary.cache_hits))
    compiled = RunProgress.of(progress, None).compile
    assert compiled is not None
    assert (compiled.graphs, compiled.cache_hits, compiled.compiled) == (2, 0, 2)
