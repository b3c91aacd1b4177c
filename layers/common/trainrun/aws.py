"""boto3 clients for the handlers, one per service and endpoint, reused across invocations."""

from __future__ import annotations

import functools
import os
from typing import Any


def client(service: str, region: str | None = None) -> Any:
    """A client for the function's region, or for `region` (an SNS topic is reached in its own)."""
    # The endpoint, region and access key are part of the key: the local runtime points
    # AWS_ENDPOINT_URL at a fresh emulator per run, and runs every function in one process, each
    # with its own role's key; a client must not outlive its endpoint nor sign for another role.
    return _client(
        service,
        os.environ.get("AWS_ENDPOINT_URL"),
        region or os.environ.get("AWS_REGION"),
        os.environ.get("AWS_ACCESS_KEY_ID"),
    )


@functools.cache
def _client(service: str, endpoint_url: str | None, region: str | None, access_key_id: str | None) -> Any:
    import boto3

    # A new session reads the credentials from the environment now (boto3's default session
    # would keep the first ones it found).
    return boto3.Session(region_name=region).client(service, endpoint_url=endpoint_url)


def pcluster_api(base_url: str, region: str) -> Any:
    """The ParallelCluster API client, signing with this function's credentials.

    Requests are signed for the region the API is deployed in (from its execute-api host name),
    which may differ from the region the clusters are created in (`region`).
    """
    import re

    import boto3

    from trainrun.adapters.pcluster import PclusterApi

    match = re.search(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com", base_url)
    api_region = match.group(1) if match else region
    return PclusterApi(base_url, session=boto3.Session(region_name=api_region), region=api_region)
