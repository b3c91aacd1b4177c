"""Schema checks against ParallelCluster's own cluster schema, offline.

aws-parallelcluster pulls in aws-cdk 1.x and jsii, so it lives in its own virtualenv
(requirements-pcluster.txt); in any other environment the test module skips itself
(`pytest.importorskip`), and nothing here imports pcluster until a test asks for it.

`ClusterSchema(cluster_name=...).load(dict)` is the syntactic half of `pcluster create-cluster`
(the API's ConfigSchemaValidator): marshmallow checks every key, type, enum and pattern. The
semantic validators, which call AWS, are never run. Loading still builds a
`SlurmClusterConfig`, which wants a region and tries one call to cache capacity reservations;
with no credentials that call fails at once, and ParallelCluster catches it and logs a warning.
Sockets are closed here so that nothing can reach the network either way.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from trainrun.logic.cluster_config import to_yaml

OFFLINE_ENV = {
    "AWS_DEFAULT_REGION": "us-west-2",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}
CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)


def _no_network(*_args: Any, **_kwargs: Any) -> None:
    raise OSError("the ParallelCluster schema tests never reach the network")


@pytest.fixture(scope="session", autouse=True)
def offline() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name in CREDENTIAL_ENV:
            patch.delenv(name, raising=False)
        for name, value in OFFLINE_ENV.items():
            patch.setenv(name, value)
        patch.setattr(socket.socket, "connect", _no_network)
        patch.setattr(socket.socket, "connect_ex", _no_network)
        yield


@pytest.fixture(scope="session")
def load_with_pcluster() -> Callable[[dict[str, Any]], Any]:
    """Load a rendered config the way the ParallelCluster API does: from its YAML text."""
    from marshmallow import ValidationError
    from pcluster.schemas.cluster_schema import ClusterSchema

    def load(config: dict[str, Any]) -> Any:
        document = yaml.safe_load(to_yaml(config))
        try:
            return ClusterSchema(cluster_name="trainrun-schema-check").load(document)
        except ValidationError as exc:
            pytest.fail(f"ParallelCluster 3.16 rejects the config: {exc.messages}\n{to_yaml(config)}")

    return load
