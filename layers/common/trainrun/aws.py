"""boto3 clients for the handlers, one per service and endpoint, reused across invocations."""

from __future__ import annotations

import functools
import os
from typing import Any


def client(service: str) -> Any:
    # The endpoint and region are part of the key: the local runtime points AWS_ENDPOINT_URL
    # at a fresh emulator per run, and a client must not outlive the endpoint it was made for.
    return _client(service, os.environ.get("AWS_ENDPOINT_URL"), os.environ.get("AWS_REGION"))


@functools.cache
def _client(service: str, endpoint_url: str | None, region: str | None) -> Any:
    import boto3

    return boto3.client(service, region_name=region, endpoint_url=endpoint_url)
