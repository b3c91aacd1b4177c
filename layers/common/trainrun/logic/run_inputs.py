"""What a run reads from S3 before its jobs start, checked before anything is created.

Prepare head node reads, as the head node's role: the workload archive (workload.source.s3, one
object), the dataset (workload.dataset.source: one object, or every object under a prefix) and
the checkpoints to resume from (workload.resume_from, a prefix). That role's S3Access is rendered
from exactly these URIs (trainrun.logic.cluster_config), in buckets the stack allows
(trainrun.logic.allowlists), so its identity policy always lets it read them. What can still stop
the run there, 25 minutes and a cluster later, is an object that is not there, or a bucket that
refuses what the identity policy allows (a bucket policy that denies, another account's bucket).

Each one is looked up by listing it (ListObjectsV2 with the key as the prefix: s3:ListBucket only,
so the checker never may read the data itself): Load run spec with its role, whose policy grants
s3:ListBucket on the config bucket and on RunBucketArns, and `trainrun plan --check` with the
operator's credentials. An empty listing means not there; a 403 that the bucket refuses the checker.

Not checked here: a bucket policy that denies s3:GetObject but not s3:ListBucket, or denies the
head node's role but not the checker, and a KMS key the head node's role may not use.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from trainrun.logic.allowlists import RunAllowLists
from trainrun.model.findings import Code, Finding, Severity
from trainrun.model.run_file import RunSpec


class RunInput(BaseModel):
    """One S3 location the head node reads: an object, or every object under a prefix."""

    model_config = ConfigDict(frozen=True)

    field: str
    uri: str
    prefix: bool

    @property
    def bucket(self) -> str:
        return self.uri.removeprefix("s3://").partition("/")[0]

    @property
    def key(self) -> str:
        return self.uri.removeprefix("s3://").partition("/")[2]


class Lookup(StrEnum):
    FOUND = "FOUND"
    MISSING = "MISSING"  # no such object, no object under the prefix, or no such bucket
    DENIED = "DENIED"  # S3 answered 403 to the checker


def run_inputs(spec: RunSpec, allowed: RunAllowLists) -> list[RunInput]:
    """What the head node reads from S3, in the buckets `allowed` lets runs use (any other is
    a BUCKET_NOT_ALLOWED finding already, and no role of the stack may list it)."""
    inputs = []
    if spec.workload.source.s3 is not None:
        inputs.append(RunInput(field="workload.source.s3", uri=spec.workload.source.s3, prefix=False))
    dataset = dataset_input(spec)
    if dataset is not None:
        inputs.append(dataset)
    if spec.workload.resume_from is not None:
        inputs.append(RunInput(field="workload.resume_from", uri=spec.workload.resume_from, prefix=True))
    return [item for item in inputs if item.bucket == allowed.config_bucket or item.bucket in allowed.buckets]


def dataset_input(spec: RunSpec) -> RunInput | None:
    """The dataset the head node stages: one object, or every object under a prefix."""
    if spec.workload.dataset is None:
        return None
    source = spec.workload.dataset.source
    key = source.removeprefix("s3://").partition("/")[2]
    return RunInput(field="workload.dataset.source", uri=source, prefix=not key or key.endswith("/"))


# What to do about a location that is not there, by field.
_MISSING_FIX = {
    "workload.source.s3": "upload the workload's archive there (aws s3 cp workload.tar.gz {uri}), or name its "
    "directory in workload.source.path and `trainrun submit` packs and uploads it",
    "workload.dataset.source": "upload the dataset there (aws s3 cp FILE {uri}, or aws s3 sync DIR {uri} for a "
    "prefix), or correct the URI",
    "workload.resume_from": "name the prefix a run exported its checkpoints to (`trainrun status RUN` shows "
    "where), or remove resume_from",
}


def input_findings(looked_up: Iterable[tuple[RunInput, Lookup]], *, checker: str) -> list[Finding]:
    """An ERROR finding for each location that is not there or that S3 refused `checker`
    ("Load run spec's role", "your credentials") to list."""
    findings = []
    for item, lookup in looked_up:
        if lookup == Lookup.MISSING:
            what = "holds no object" if item.prefix else "does not exist"
            fix = _MISSING_FIX[item.field].format(uri=item.uri)
            message = f"{item.field}: {item.uri} {what}: the run would fail at Prepare head node; {fix}"
            findings.append(Finding(code=Code.S3_INPUT_NOT_FOUND, severity=Severity.ERROR, message=message))
        elif lookup == Lookup.DENIED:
            message = (
                f"{item.field}: S3 refused {checker} to list {item.uri} (403 Forbidden), although the stack's "
                f"policies allow bucket {item.bucket}: its bucket policy (or its owner, another account) refuses "
                "it and would refuse the head node's role too; let the stack's roles list and read it in the "
                "bucket's policy"
            )
            findings.append(Finding(code=Code.S3_INPUT_NOT_READABLE, severity=Severity.ERROR, message=message))
    return findings
