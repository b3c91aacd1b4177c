"""boto3 clients for the handlers, one per service and endpoint, reused across invocations."""

from __future__ import annotations

import functools
import os
import threading
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
    # The credentials are read from the environment now, for this key; the service models come
    # from one boto3 session shared by every client (a session per client would load each
    # model again: hundreds of MB per run where many keys and endpoints share one process).
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY") if access_key_id else None
    token = os.environ.get("AWS_SESSION_TOKEN") if access_key_id else None
    return new_client(
        service,
        region_name=region,
        endpoint_url=endpoint_url,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret,
        aws_session_token=token,
    )


def new_client(service: str, **options: Any) -> Any:
    """An uncached client made from the shared session's models (`options` as boto3's client())."""
    with _creating:  # a session is not safe to create clients from in parallel
        return _models().client(service, **options)


_creating = threading.Lock()


@functools.cache
def _models() -> Any:
    import boto3

    return boto3.Session()


def forget_clients() -> None:
    """Drop every cached client: the local runtime calls this when its emulator stops."""
    _client.cache_clear()
    _pcluster_api.cache_clear()


def pcluster_api(base_url: str, region: str, role_arn: str) -> Any:
    """The ParallelCluster API client, signing as the API's user role (`role_arn`).

    Requests are signed for the region the API is deployed in (from its execute-api host name),
    which may differ from the region the clusters are created in (`region`). The role's
    credentials are kept with the client: a warm function assumes the role again only shortly
    before they expire.
    """
    import re

    match = re.search(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com", base_url)
    api_region = match.group(1) if match else region
    function = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "function")
    return _pcluster_api(base_url, api_region, role_arn, os.environ.get("AWS_ENDPOINT_URL"), function)


@functools.cache
def _pcluster_api(base_url: str, api_region: str, role_arn: str, endpoint_url: str | None, function: str) -> Any:
    # One per function too: where several functions share a process (the local runtime), each
    # assumes the role with its own credentials, as it must be allowed to.
    from trainrun.adapters.pcluster import AssumedRoleCredentials, PclusterApi

    credentials = AssumedRoleCredentials(client("sts"), role_arn, session_name=f"trainrun-{function}")
    return PclusterApi(base_url, session=credentials, region=api_region)
