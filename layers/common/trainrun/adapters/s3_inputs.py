"""Looking up what a run reads from S3 (trainrun.logic.run_inputs), by listing only."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from trainrun.adapters.aws_errors import error_code, raise_if_transient
from trainrun.logic.run_inputs import Lookup, RunInput

_MISSING_CODES = {"NoSuchBucket", "NoSuchKey", "NotFound", "404"}


def look_up(s3: Any, item: RunInput) -> Lookup:
    """One ListObjectsV2 with the key as the prefix: an object is there when the first key listed
    is its own (keys are listed in order, and a key comes before every longer key it begins)."""
    try:
        listed = s3.list_objects_v2(Bucket=item.bucket, Prefix=item.key, MaxKeys=1)
    except ClientError as exc:
        raise_if_transient(exc, "ListObjectsV2")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if error_code(exc) in _MISSING_CODES or status == 404:
            return Lookup.MISSING
        if status == 403:
            return Lookup.DENIED
        raise
    keys = [entry["Key"] for entry in listed.get("Contents", [])]
    found = bool(keys) if item.prefix else keys[:1] == [item.key]
    return Lookup.FOUND if found else Lookup.MISSING


def look_up_all(s3: Any, items: list[RunInput]) -> list[tuple[RunInput, Lookup]]:
    return [(item, look_up(s3, item)) for item in items]


def size_of(s3: Any, item: RunInput) -> int | None:
    """The bytes `item` holds, listed as `look_up` lists (s3:ListBucket only): the object's size, or
    the sum over the prefix's objects. None when there is nothing there."""
    if not item.prefix:
        listed = s3.list_objects_v2(Bucket=item.bucket, Prefix=item.key, MaxKeys=1).get("Contents", [])
        return int(listed[0]["Size"]) if listed[:1] and listed[0]["Key"] == item.key else None
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=item.bucket, Prefix=item.key)
    sizes = [int(entry["Size"]) for page in pages for entry in page.get("Contents", [])]
    return sum(sizes) if sizes else None
