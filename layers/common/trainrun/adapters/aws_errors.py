"""Telling a retryable AWS error from a final one, once for every adapter.

Throttling and 5xx become TransientAwsError, which the state machine retries with backoff;
anything else (access denied, bad input, not found) is the adapter's to interpret.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from trainrun.errors import TransientAwsError

TRANSIENT_CODES = {
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "RequestThrottled",
    "RequestThrottledException",
    "SlowDown",
    "InternalError",
    "InternalFailure",
    "InternalServerError",
    "InternalServerErrorException",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "Unavailable",
}


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def raise_if_transient(exc: ClientError, operation: str) -> None:
    """Throttling and 5xx are worth retrying; anything else (access denied, bad input) is not."""
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if error_code(exc) in TRANSIENT_CODES or status >= 500:
        raise TransientAwsError(f"{operation} failed and may succeed if retried: {exc}") from exc


def call(method: Callable[..., dict[str, Any]], operation: str, **kwargs: Any) -> dict[str, Any]:
    """Call a boto3 client method; a retryable failure becomes TransientAwsError, others pass through."""
    try:
        return method(**kwargs)
    except ClientError as exc:
        raise_if_transient(exc, operation)
        raise
