"""Shared fixtures for the unit tests of the control plane: an in-process AWS, built from template.yaml.

Every AWS call goes to `moto.mock_aws` in this process. The runs table is created from the
template's own `RunsTable` definition and the config bucket gets the template's versioning, so a
change to either in template.yaml is what the tests exercise.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.loaders
import botocore.session
import pytest
from moto import mock_aws

from trainrun.local import capacity_emulator, fsx_emulator
from trainrun.local.fixture import load_fixture
from trainrun.local.template import load_template
from trainrun.logic.allowlists import RunAllowLists
from trainrun.model.run_record import RunStore
from trainrun.steps.run_events import RunEvents

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
EXAMPLE_ACCOUNT = ROOT / "examples" / "accounts" / "default.yaml"
REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's default account
CONFIG_BUCKET = "trainrun-config-test"
# What the example run files name, allowed as the example account's stack allows it (RunBucketArns).
EXAMPLE_ALLOW_LISTS = RunAllowLists(
    config_bucket=CONFIG_BUCKET, buckets=frozenset({"trainrun-examples", "my-trainrun-data"})
)
RUNS_TABLE = "trainrun-runs-test"
STATE_MACHINE_NAME = "trainrun-run-test"
# Step Functions needs a role ARN to create a state machine; moto never assumes it.
STATE_MACHINE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/trainrun-state-machine-test"
PASS_DEFINITION = '{"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": true}}}'


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests open no network sockets at all: moto answers in process (mock_aws).

    Loopback is refused too, so a test that needs a server belongs in tests/integration.
    """

    def refuse(self: socket.socket, address: Any) -> Any:
        raise OSError(f"unit tests open no network connections (tried {address!r}); use moto's mock_aws")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, no_network: None) -> None:
    """Fake credentials and the region, and nothing from the user's AWS configuration."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def aws(aws_env: None) -> Iterator[None]:
    """A fresh in-process AWS account; emulated capacity reservations start empty and are forgotten after."""
    with mock_aws():
        # mock_aws makes boto3.client() build a fresh default session, which would parse each
        # service's model again in every test: share the parsed models (credentials are not shared)
        boto3.DEFAULT_SESSION = boto3.Session(botocore_session=_session_with_shared_models())
        capacity_emulator.reset()
        yield
        capacity_emulator.reset()


@pytest.fixture(scope="session")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE)


def resource_properties(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    properties: dict[str, Any] = template["Resources"][logical_id]["Properties"]
    return properties


@pytest.fixture
def dynamodb(aws: None) -> Any:
    return boto3.client("dynamodb", region_name=REGION)


@pytest.fixture
def runs_table(dynamodb: Any, template: dict[str, Any]) -> str:
    """The runs table, created from template.yaml's RunsTable definition."""
    definition = resource_properties(template, "RunsTable")
    dynamodb.create_table(
        TableName=RUNS_TABLE,
        KeySchema=definition["KeySchema"],
        AttributeDefinitions=definition["AttributeDefinitions"],
        BillingMode=definition["BillingMode"],
    )
    return RUNS_TABLE


@pytest.fixture
def store(dynamodb: Any, runs_table: str) -> RunStore:
    return RunStore(dynamodb, runs_table)


@pytest.fixture
def s3(aws: None) -> Any:
    return boto3.client("s3", region_name=REGION)


@pytest.fixture
def config_bucket(s3: Any, template: dict[str, Any]) -> str:
    """The config bucket, versioned as template.yaml's ConfigBucket is; and the objects the example
    run files read (the example account's s3_objects, empty), which Load run spec looks up."""
    definition = resource_properties(template, "ConfigBucket")
    s3.create_bucket(Bucket=CONFIG_BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_bucket_versioning(
        Bucket=CONFIG_BUCKET, VersioningConfiguration={"Status": definition["VersioningConfiguration"]["Status"]}
    )
    for item in load_fixture(EXAMPLE_ACCOUNT).s3_objects:
        if item.bucket not in {bucket["Name"] for bucket in s3.list_buckets()["Buckets"]}:
            s3.create_bucket(Bucket=item.bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
        s3.put_object(Bucket=item.bucket, Key=item.key, Body=b"")
    return CONFIG_BUCKET


class RecordedMetrics:
    """Stands in for Powertools' Metrics (whose metric set is shared by every instance): what was emitted."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, float]] = []

    def add_metric(self, name: str, unit: str, value: float) -> None:
        self.emitted.append((name, value))


def moto_run_events() -> RunEvents:
    """A run-state event publisher on the running mock_aws: its default bus, SNS in any region."""
    return RunEvents(
        boto3.client("events", region_name=REGION),
        lambda region: boto3.client("sns", region_name=region),
        stack="trainrun-test",
        metrics=RecordedMetrics(),
    )


@pytest.fixture
def sfn(aws: None) -> Any:
    return boto3.client("stepfunctions", region_name=REGION)


@pytest.fixture
def state_machine_arn(sfn: Any) -> str:
    """A STANDARD state machine (as RunStateMachine is) with one Pass state."""
    created = sfn.create_state_machine(
        name=STATE_MACHINE_NAME, definition=PASS_DEFINITION, roleArn=STATE_MACHINE_ROLE, type="STANDARD"
    )
    arn: str = created["stateMachineArn"]
    return arn


# Service models, parsed once for this process.
_MODELS = botocore.loaders.create_loader()


def _session_with_shared_models() -> botocore.session.Session:
    """A botocore session whose service models are this process's, parsed once (moto's catalogue
    of AMIs is not loaded either: trainrun.local turns it off, no test needs one)."""
    session = botocore.session.get_session()
    session.register_component("data_loader", _MODELS)
    return session


@pytest.fixture
def ec2(aws: None) -> Any:
    return boto3.client("ec2", region_name=REGION)


@pytest.fixture
def fsx(aws: None) -> Iterator[Any]:
    fsx_emulator.install()
    fsx_emulator.reset()
    yield boto3.client("fsx", region_name=REGION)
    fsx_emulator.reset()
