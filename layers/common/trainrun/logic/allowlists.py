"""Which buckets and topics a run file may name: the stack decides, never the run file.

A run file that names a directory on the submitter's disk (workload.source.path) names nothing a
run can read: `trainrun submit` uploads it and names the archive instead; one that arrives as it
was written is refused too.

A run file's S3 URIs become what the head node may read and what FSx links, and its topic
where the functions publish. Those come from the stack's parameters (RunBucketArns,
RunTopicArns), and the functions' policies grant exactly them; Load run spec refuses anything
else with a finding that names the parameter, before anything is created.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict

from trainrun.logic.compile_cache import CACHE_PREFIX
from trainrun.model.checkpoints import CHECKPOINTS_PREFIX
from trainrun.model.findings import Code, Finding, Severity
from trainrun.model.run_file import COMPILE_CACHE_OFF, RunSpec

BUCKETS_PARAMETER = "RunBucketArns"
TOPICS_PARAMETER = "RunTopicArns"
# Where the config bucket keeps run files: no run reads them (they are other people's).
RUN_FILES_PREFIX = "runs/"
_BUCKET_ARN = re.compile(r"^arn:aws[a-z-]*:s3:::([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])$")


class RunAllowLists(BaseModel):
    model_config = ConfigDict(frozen=True)

    config_bucket: str
    buckets: frozenset[str] = frozenset()
    topic_arns: frozenset[str] = frozenset()

    @classmethod
    def from_parameters(cls, *, config_bucket: str, bucket_arns: str, topic_arns: str) -> RunAllowLists:
        """From the stack parameters' comma-separated values (empty: none)."""
        buckets = set()
        for arn in _items(bucket_arns):
            match = _BUCKET_ARN.match(arn)
            if match is None:
                raise ValueError(f"{BUCKETS_PARAMETER}: {arn!r} is not an S3 bucket ARN (arn:aws:s3:::name)")
            buckets.add(match.group(1))
        return cls(config_bucket=config_bucket, buckets=frozenset(buckets), topic_arns=frozenset(_items(topic_arns)))


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _s3_uses(spec: RunSpec) -> Iterator[tuple[str, str, bool]]:
    """(field, URI, whole prefix?) for every S3 location the run file names."""
    if spec.workload.source.s3 is not None:
        yield "workload.source.s3", spec.workload.source.s3, False
    if spec.workload.dataset is not None:
        source = spec.workload.dataset.source
        _, key = _split(source)
        yield "workload.dataset.source", source, not key or source.endswith("/")
    if spec.storage.fsx.data_repository is not None:
        yield "storage.fsx.data_repository", spec.storage.fsx.data_repository, True
    if spec.workload.compile_cache not in (None, COMPILE_CACHE_OFF):
        yield "workload.compile_cache", spec.workload.compile_cache, True
    if spec.workload.resume_from is not None:
        yield "workload.resume_from", spec.workload.resume_from, True


def check_allowed(spec: RunSpec, allowed: RunAllowLists) -> list[Finding]:
    """An ERROR finding for every bucket or topic of `spec` the stack does not allow, and for a
    local directory as the workload."""
    findings = []
    if spec.workload.source.path is not None:
        findings.append(
            _error(
                Code.SOURCE_NOT_PACKED,
                f"workload.source.path: {spec.workload.source.path!r} is a directory on the submitter's machine, "
                "which the run cannot read; submit the run file with `trainrun submit RUN.yaml` (not aws s3 cp): "
                "it packs the directory, uploads it beside the run file and names the archive in workload.source.s3",
            )
        )
    for field, uri, prefix in _s3_uses(spec):
        bucket, key = _split(uri)
        if bucket == allowed.config_bucket:
            # The nodes may write the cache: in the config bucket, only among the stack's caches
            # (anywhere else they could overwrite run files or the Neuron install script).
            if field == "workload.compile_cache" and not key.startswith(f"{CACHE_PREFIX}/"):
                findings.append(
                    _error(
                        Code.CONFIG_BUCKET_RUN_FILES,
                        f"{field}: {uri} would let the cluster's nodes write {key or 'every file'!r} of the "
                        f"config bucket; put a cache there under {CACHE_PREFIX}/, "
                        f"or in a bucket of {BUCKETS_PARAMETER}",
                    )
                )
                continue
            if field == "workload.resume_from":
                # The config bucket's checkpoints/ holds the stack's exported checkpoints; a run
                # reads only the objects under the prefix it names (trainrun.logic.cluster_config).
                if not key.startswith(CHECKPOINTS_PREFIX):
                    findings.append(
                        _error(
                            Code.CONFIG_BUCKET_RUN_FILES,
                            f"{field}: {uri} is outside {CHECKPOINTS_PREFIX} of the config bucket, the only "
                            "prefix of it a run may resume from; name a run's exported checkpoints "
                            f"(s3://{bucket}/{CHECKPOINTS_PREFIX}<run id>/) or a bucket of {BUCKETS_PARAMETER}",
                        )
                    )
                continue
            if key.startswith(RUN_FILES_PREFIX) or (prefix and field == "workload.dataset.source"):
                what = "run files" if key.startswith(RUN_FILES_PREFIX) else "every file (a prefix needs the bucket)"
                findings.append(
                    _error(
                        Code.CONFIG_BUCKET_RUN_FILES,
                        f"{field}: {uri} would let the run read {what} of the config bucket; "
                        f"put it outside {RUN_FILES_PREFIX} as one object, or in a bucket of {BUCKETS_PARAMETER}",
                    )
                )
            continue
        if bucket not in allowed.buckets:
            findings.append(
                _error(
                    Code.BUCKET_NOT_ALLOWED,
                    f"{field}: bucket {bucket!r} is not one this stack lets runs use; add "
                    f"arn:aws:s3:::{bucket} to the stack parameter {BUCKETS_PARAMETER} "
                    f"(now: {_listed(allowed.buckets, 'the config bucket only')})",
                )
            )
    topic = spec.notify.sns_topic_arn
    if topic is not None and topic not in allowed.topic_arns:
        findings.append(
            _error(
                Code.TOPIC_NOT_ALLOWED,
                f"notify.sns_topic_arn: {topic} is not a topic this stack lets runs notify; add it to the "
                f"stack parameter {TOPICS_PARAMETER} (now: {_listed(allowed.topic_arns, 'none')})",
            )
        )
    return findings


def _listed(values: frozenset[str], empty: str) -> str:
    return ", ".join(sorted(values)) if values else empty


def _error(code: Code, message: str) -> Finding:
    return Finding(code=code, severity=Severity.ERROR, message=message)
