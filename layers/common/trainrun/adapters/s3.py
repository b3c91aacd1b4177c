"""S3 calls the steps make with their own role (most of S3 is the head node's, over SSM)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from trainrun.adapters.aws_errors import error_code, raise_if_transient
from trainrun.errors import TrainrunError


class ObjectNotCopied(TrainrunError):
    """An S3 object could not be copied (missing, or not readable by the step's role)."""


def copy_object(s3: Any, source_uri: str, bucket: str, key: str) -> str:
    """Copy the object at `source_uri` to `bucket`/`key`, server-side; its s3:// URI there.

    The managed copy: one CopyObject up to its threshold, a multipart copy past it (CopyObject takes
    at most 5 GB). Throttling and 5xx become TransientAwsError."""
    source_bucket, _, source_key = source_uri.removeprefix("s3://").partition("/")
    try:
        s3.copy({"Bucket": source_bucket, "Key": source_key}, bucket, key)
    except ClientError as exc:
        raise_if_transient(exc, f"copying {source_uri}")
        raise ObjectNotCopied(f"{source_uri} cannot be copied to s3://{bucket}/{key}: {error_code(exc)}") from exc
    return f"s3://{bucket}/{key}"
