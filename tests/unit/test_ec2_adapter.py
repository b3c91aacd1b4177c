"""The EC2 adapter against moto with the capacity emulator, and its error handling.

Real boto3 clients talk to `moto.mock_aws` (in process, no sockets), with the emulator's
capacity reservations and groups seeded from an account fixture. Error paths moto cannot
produce (throttling, 5xx) use botocore's Stubber.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws
from moto.resourcegroups import urls as resourcegroups_urls

from trainrun.adapters.ec2 import lookup_capacity
from trainrun.errors import TransientAwsError
from trainrun.local import capacity_emulator
from trainrun.local.fixture import AccountFixture, load_fixture
from trainrun.logic.capacity import assess_capacity
from trainrun.model.findings import Code, Severity, has_errors
from trainrun.model.run_file import Capacity, RunSpec

REGION = "us-west-2"
ACCOUNT = "123456789012"
RESERVATION_ID = "cr-0123456789abcdef0"
OTHER_ID = "cr-0123456789abcdef1"
GROUP_ARN = f"arn:aws:resource-groups:{REGION}:{ACCOUNT}:group/trn1-pool"
EXAMPLE_ACCOUNT = Path(__file__).resolve().parents[2] / "examples" / "accounts" / "default.yaml"


def fixture_of(*reservations: dict[str, Any], groups: list[dict[str, Any]] | None = None) -> AccountFixture:
    return AccountFixture.model_validate(
        {"region": REGION, "capacity_reservations": list(reservations), "capacity_reservation_groups": groups or []}
    )


def reservation(id: str = RESERVATION_ID, **fields: Any) -> dict[str, Any]:
    return {
        "id": id,
        "instance_type": "trn1.32xlarge",
        "availability_zone": "us-west-2d",
        "total_instance_count": 16,
        "available_instance_count": 16,
        **fields,
    }


def by_id(reservation_id: str = RESERVATION_ID, **fields: Any) -> Capacity:
    return Capacity(reservation_id=reservation_id, instance_type="trn1.32xlarge", nodes=16, **fields)


def by_group(arn: str = GROUP_ARN) -> Capacity:
    return Capacity(reservation_group_arn=arn, instance_type="trn1.32xlarge", nodes=16)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        capacity_emulator.reset()
        yield
        capacity_emulator.reset()


@pytest.fixture
def ec2(aws: None) -> Any:
    return boto3.client("ec2", region_name=REGION)


@pytest.fixture
def groups(aws: None) -> Any:
    return boto3.client("resource-groups", region_name=REGION)


# --- one reservation ----------------------------------------------------------------------------


def test_a_seeded_reservation_is_described_with_its_fields(ec2: Any, groups: Any) -> None:
    # Given an open capacity block ending at a known time
    ends = datetime(2030, 1, 1, tzinfo=UTC)
    capacity_emulator.seed(
        fixture_of(
            reservation(
                available_instance_count=12,
                end_date=ends,
                instance_match_criteria="open",
                reservation_type="capacity-block",
            )
        )
    )
    # When the adapter looks it up
    found = lookup_capacity(ec2, groups, by_id())
    # Then every field the assessment needs comes through botocore intact
    (described,) = found.reservations
    assert described.id == RESERVATION_ID
    assert described.arn == f"arn:aws:ec2:{REGION}:{ACCOUNT}:capacity-reservation/{RESERVATION_ID}"
    assert (described.instance_type, described.availability_zone) == ("trn1.32xlarge", "us-west-2d")
    assert (described.total_instance_count, described.available_instance_count) == (16, 12)
    assert (described.state, described.platform) == ("active", "Linux/UNIX")
    assert described.end_date == ends
    assert (described.instance_match_criteria, described.reservation_type) == ("open", "capacity-block")
    assert found.missing_ids == []


def test_an_unknown_reservation_is_listed_as_missing(ec2: Any, groups: Any) -> None:
    capacity_emulator.seed(fixture_of(reservation()))
    found = lookup_capacity(ec2, groups, by_id(OTHER_ID))
    assert (found.reservations, found.missing_ids) == ([], [OTHER_ID])


def test_the_emulator_fails_an_unknown_id_as_ec2_does(ec2: Any) -> None:
    # Given no reservation at all
    # When EC2 is asked about one
    with pytest.raises(ClientError) as raised:
        ec2.describe_capacity_reservations(CapacityReservationIds=[OTHER_ID])
    # Then botocore raises EC2's error code, as a client (400) error
    error = raised.value.response
    assert error["Error"]["Code"] == "InvalidCapacityReservationId.NotFound"
    assert OTHER_ID in error["Error"]["Message"]
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_the_emulator_fails_a_malformed_id_as_ec2_does(ec2: Any) -> None:
    with pytest.raises(ClientError) as raised:
        ec2.describe_capacity_reservations(CapacityReservationIds=["not-a-reservation"])
    assert raised.value.response["Error"]["Code"] == "InvalidCapacityReservationId.Malformed"


def test_the_emulator_filters_by_instance_type(ec2: Any) -> None:
    capacity_emulator.seed(fixture_of(reservation(), reservation(OTHER_ID, instance_type="trn1n.32xlarge")))
    answer = ec2.describe_capacity_reservations(Filters=[{"Name": "instance-type", "Values": ["trn1n.32xlarge"]}])
    assert [r["CapacityReservationId"] for r in answer["CapacityReservations"]] == [OTHER_ID]


def test_the_zone_of_the_reservation_is_checked_for_the_instance_type(ec2: Any, groups: Any) -> None:
    # moto 5.2.5's offering data lists trn1.32xlarge in us-west-2d (the emulator relies on it)
    capacity_emulator.seed(fixture_of(reservation()))
    assert lookup_capacity(ec2, groups, by_id()).offerings == {"us-west-2d": ["trn1.32xlarge"]}


def test_a_zone_without_the_instance_type_offers_nothing(ec2: Any, groups: Any) -> None:
    capacity_emulator.seed(fixture_of(reservation(availability_zone="us-west-2a")))
    assert lookup_capacity(ec2, groups, by_id()).offerings == {"us-west-2a": []}


def test_the_zone_the_run_names_is_checked_too(ec2: Any, groups: Any) -> None:
    capacity_emulator.seed(fixture_of(reservation()))
    offerings = lookup_capacity(ec2, groups, by_id(availability_zone="us-west-2b")).offerings
    assert offerings == {"us-west-2b": ["trn1.32xlarge"], "us-west-2d": ["trn1.32xlarge"]}


# --- groups -------------------------------------------------------------------------------------


def test_a_groups_members_are_listed_and_described(ec2: Any, groups: Any) -> None:
    capacity_emulator.seed(
        fixture_of(
            reservation(),
            reservation(OTHER_ID),
            groups=[{"arn": GROUP_ARN, "reservations": [RESERVATION_ID, OTHER_ID]}],
        )
    )
    found = lookup_capacity(ec2, groups, by_group())
    assert found.group_member_ids == [RESERVATION_ID, OTHER_ID]
    assert sorted(r.id for r in found.reservations) == [RESERVATION_ID, OTHER_ID]


def test_a_group_that_does_not_exist_has_no_member_list(ec2: Any, groups: Any) -> None:
    found = lookup_capacity(ec2, groups, by_group(f"arn:aws:resource-groups:{REGION}:{ACCOUNT}:group/absent"))
    assert found.group_member_ids is None
    assert found.reservations == []


def test_a_group_without_members_has_an_empty_member_list(ec2: Any, groups: Any) -> None:
    capacity_emulator.seed(fixture_of(groups=[{"arn": GROUP_ARN, "reservations": []}]))
    assert lookup_capacity(ec2, groups, by_group()).group_member_ids == []


def test_the_emulator_pages_group_resources(groups: Any) -> None:
    ids = [f"cr-{n:017x}" for n in range(1, 4)]
    capacity_emulator.seed(fixture_of(*(reservation(i) for i in ids), groups=[{"arn": GROUP_ARN, "reservations": ids}]))
    first = groups.list_group_resources(Group=GROUP_ARN, MaxResults=2)
    rest = groups.list_group_resources(Group=GROUP_ARN, MaxResults=2, NextToken=first["NextToken"])
    assert len(first["Resources"]) == 2
    assert len(rest["Resources"]) == 1 and "NextToken" not in rest


def test_the_emulator_fails_an_unknown_group_as_resource_groups_does(groups: Any) -> None:
    with pytest.raises(groups.exceptions.NotFoundException):
        groups.list_group_resources(Group=f"arn:aws:resource-groups:{REGION}:{ACCOUNT}:group/absent")


def test_a_group_member_ec2_does_not_know_is_listed_as_missing() -> None:
    # Given EC2 that fails a call naming an unknown id, and describes the known one alone
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    groups = boto3.client("resource-groups", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    members = [f"arn:aws:ec2:{REGION}:{ACCOUNT}:capacity-reservation/{i}" for i in (RESERVATION_ID, OTHER_ID)]
    with Stubber(ec2) as ec2_stub, Stubber(groups) as groups_stub:
        groups_stub.add_response(
            "list_group_resources",
            {
                "Resources": [
                    {"Identifier": {"ResourceArn": a, "ResourceType": "AWS::EC2::CapacityReservation"}} for a in members
                ]
            },
        )
        ec2_stub.add_client_error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound")
        ec2_stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_described(RESERVATION_ID)]})
        ec2_stub.add_client_error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound")
        ec2_stub.add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": []})
        # When the group is looked up
        found = lookup_capacity(ec2, groups, by_group())
    # Then the known member is described and the other is missing
    assert [r.id for r in found.reservations] == [RESERVATION_ID]
    assert found.missing_ids == [OTHER_ID]


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status"), [("RequestLimitExceeded", 503), ("InternalError", 500), ("Unavailable", 503)]
)
def test_throttling_and_server_errors_are_transient(code: str, status: int) -> None:
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_capacity_reservations", code, http_status_code=status)
        with pytest.raises(TransientAwsError) as raised:
            lookup_capacity(ec2, None, by_id())
    assert isinstance(raised.value.__cause__, ClientError)


def test_a_throttled_group_listing_is_transient() -> None:
    groups = boto3.client("resource-groups", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(groups) as stub:
        stub.add_client_error("list_group_resources", "TooManyRequestsException", http_status_code=429)
        with pytest.raises(TransientAwsError):
            lookup_capacity(None, groups, by_group())


def test_access_denied_is_not_transient() -> None:
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_capacity_reservations", "UnauthorizedOperation", http_status_code=403)
        with pytest.raises(ClientError) as raised:
            lookup_capacity(ec2, None, by_id())
    assert not isinstance(raised.value, TransientAwsError)


# --- the emulator itself ------------------------------------------------------------------------


def test_install_twice_patches_once(ec2: Any) -> None:
    capacity_emulator.install()
    capacity_emulator.install()
    routes = [path for path in resourcegroups_urls.url_paths if "list-group-resources" in path]
    assert routes == ["{0}/list-group-resources$"]


def test_seeding_again_replaces_the_earlier_seed(ec2: Any, groups: Any) -> None:
    capacity_emulator.seed(fixture_of(reservation(), groups=[{"arn": GROUP_ARN, "reservations": [RESERVATION_ID]}]))
    capacity_emulator.seed(fixture_of(reservation(OTHER_ID), groups=[{"arn": GROUP_ARN, "reservations": [OTHER_ID]}]))
    found = lookup_capacity(ec2, groups, by_group())
    assert found.group_member_ids == [OTHER_ID]
    assert lookup_capacity(ec2, groups, by_id()).missing_ids == [RESERVATION_ID]


def test_seeding_again_removes_groups_the_earlier_seed_made(ec2: Any, groups: Any) -> None:
    capacity_emulator.seed(fixture_of(reservation(), groups=[{"arn": GROUP_ARN, "reservations": [RESERVATION_ID]}]))
    capacity_emulator.seed(fixture_of(reservation()))
    assert lookup_capacity(ec2, groups, by_group()).group_member_ids is None


def test_reset_forgets_every_reservation(ec2: Any, groups: Any) -> None:
    capacity_emulator.seed(fixture_of(reservation()))
    capacity_emulator.reset()
    assert lookup_capacity(ec2, groups, by_id()).missing_ids == [RESERVATION_ID]


def test_a_group_of_another_account_is_not_seeded(aws: None) -> None:
    other = "arn:aws:resource-groups:us-west-2:210987654321:group/trn1-pool"
    with pytest.raises(ValueError, match="210987654321"):
        capacity_emulator.seed(fixture_of(groups=[{"arn": other, "reservations": []}]))


def test_the_example_account_passes_validate_capacity_for_its_group(ec2: Any, groups: Any) -> None:
    # Given the default local account and a 16-node run on its reservation group
    capacity_emulator.seed(load_fixture(EXAMPLE_ACCOUNT))
    spec = RunSpec.model_validate(
        {
            "name": "bert-phase1",
            "capacity": {"reservation_group_arn": GROUP_ARN, "instance_type": "trn1.32xlarge", "nodes": 16},
            "workload": {"source": {"s3": "s3://bucket/workload.tar.gz"}, "train": "./train.sh"},
        }
    )
    # When capacity is looked up and assessed
    findings = assess_capacity(
        spec, lookup_capacity(ec2, groups, spec.capacity), stack_region=REGION, now=datetime.now(UTC)
    )
    # Then the run is accepted, in us-west-2d
    assert not has_errors(findings)
    selected = [f for f in findings if f.code == Code.AVAILABILITY_ZONE_SELECTED]
    assert selected[0].severity is Severity.INFO and "us-west-2d" in selected[0].message


def _described(reservation_id: str) -> dict[str, Any]:
    return {
        "CapacityReservationId": reservation_id,
        "InstanceType": "trn1.32xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-west-2d",
        "TotalInstanceCount": 16,
        "AvailableInstanceCount": 16,
        "State": "active",
        "InstanceMatchCriteria": "targeted",
    }


# --- a reservation's life along the clock -------------------------------------------------------


def described_now(ec2: Any) -> dict[str, Any]:
    (described,) = ec2.describe_capacity_reservations(CapacityReservationIds=[RESERVATION_ID])["CapacityReservations"]
    return described


def launch(ec2: Any, count: int = 1, **target: str) -> Any:
    subnet = ec2.create_subnet(
        VpcId=ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"],
        CidrBlock="10.0.0.0/24",
        AvailabilityZone="us-west-2d",
    )["Subnet"]["SubnetId"]
    return ec2.run_instances(
        ImageId="ami-04681a1dbd79675a5",
        InstanceType="trn1.32xlarge",
        MinCount=count,
        MaxCount=count,
        SubnetId=subnet,
        CapacityReservationSpecification={
            "CapacityReservationTarget": target or {"CapacityReservationId": RESERVATION_ID}
        },
    )


def block_moving_along(monkeypatch: pytest.MonkeyPatch, starts: datetime, ends: datetime) -> list[datetime]:
    """A capacity block seeded with these dates, and the emulator's clock, which the test moves."""
    clock = [starts - timedelta(minutes=5)]

    class Clock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return clock[0]

    monkeypatch.setattr(capacity_emulator, "datetime", Clock)
    capacity_emulator.seed(fixture_of(reservation(start_date=starts, end_date=ends, reservation_type="capacity-block")))
    return clock


def test_a_capacity_block_is_scheduled_then_active_then_expired_with_the_clock(
    ec2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a block from 12:00 to 14:00, described at 11:55
    starts, ends = datetime(2030, 1, 1, 12, tzinfo=UTC), datetime(2030, 1, 1, 14, tzinfo=UTC)
    clock = block_moving_along(monkeypatch, starts, ends)
    # Then it is scheduled, with no capacity available yet (as EC2 shows a block before its start)
    assert (described_now(ec2)["State"], described_now(ec2)["AvailableInstanceCount"]) == ("scheduled", 0)
    assert described_now(ec2)["StartDate"] == starts
    # And at its start it is active with its instances, and at its end expired with none
    clock[0] = starts
    assert (described_now(ec2)["State"], described_now(ec2)["AvailableInstanceCount"]) == ("active", 16)
    clock[0] = ends
    assert (described_now(ec2)["State"], described_now(ec2)["AvailableInstanceCount"]) == ("expired", 0)


def test_no_instance_launches_into_a_block_before_its_start(ec2: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    starts = datetime(2030, 1, 1, 12, tzinfo=UTC)
    clock = block_moving_along(monkeypatch, starts, starts + timedelta(hours=2))
    # Before the start, EC2 refuses the launch; from the start, it launches
    with pytest.raises(ClientError) as refused:
        launch(ec2)
    assert refused.value.response["Error"]["Code"] == "ReservationCapacityExceeded"
    assert "scheduled" in refused.value.response["Error"]["Message"]
    clock[0] = starts
    assert len(launch(ec2)["Instances"]) == 1
    # And never more instances than the block holds
    with pytest.raises(ClientError, match="ReservationCapacityExceeded"):
        launch(ec2, count=17)


def test_a_launch_into_a_group_needs_an_active_member(ec2: Any) -> None:
    capacity_emulator.seed(
        fixture_of(
            reservation(state="expired"),
            reservation(OTHER_ID, available_instance_count=2),
            groups=[{"arn": GROUP_ARN, "reservations": [RESERVATION_ID, OTHER_ID]}],
        )
    )
    assert len(launch(ec2, 2, CapacityReservationResourceGroupArn=GROUP_ARN)["Instances"]) == 2
    with pytest.raises(ClientError, match="ReservationCapacityExceeded"):
        launch(ec2, 3, CapacityReservationResourceGroupArn=GROUP_ARN)


def test_a_launch_that_targets_no_reservation_is_not_checked(ec2: Any) -> None:
    subnet = ec2.create_subnet(VpcId=ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"], CidrBlock="10.1.0.0/24")[
        "Subnet"
    ]["SubnetId"]
    ran = ec2.run_instances(
        ImageId="ami-04681a1dbd79675a5", InstanceType="t3.micro", MinCount=1, MaxCount=1, SubnetId=subnet
    )
    assert len(ran["Instances"]) == 1


def test_launches_in_an_account_no_fixture_was_seeded_into_are_not_checked(ec2: Any) -> None:
    # The emulator is installed in the process, but this account holds no fixture reservations
    assert len(launch(ec2)["Instances"]) == 1
