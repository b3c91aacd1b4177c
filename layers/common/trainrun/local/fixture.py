"""The local account fixture: what the emulated AWS account holds before a local run starts.

Moto has no EC2 capacity reservations, so a local run's reservations and reservation groups
come from this file (`examples/accounts/default.yaml` is the default) and are loaded into moto by
`trainrun.local.capacity_emulator.seed`. The shape follows EC2's own field names, lower-cased:

    region: us-west-2
    capacity_reservations:
      - {id: cr-0123456789abcdef0, instance_type: trn1.32xlarge, availability_zone: us-west-2d,
         total_instance_count: 16, available_instance_count: 16, state: active, end_date: null,
         instance_match_criteria: targeted, platform: Linux/UNIX, reservation_type: default}
    capacity_reservation_groups:
      - {arn: "arn:aws:resource-groups:us-west-2:123456789012:group/trn1-pool",
         reservations: [cr-0123456789abcdef0]}

`start_date` and `end_date` are an ISO 8601 timestamp (UTC unless it carries an offset), `null`
(unlimited), or a duration relative to the moment the fixture is loaded: `+2h` is two hours from
now, `-30m` thirty minutes ago (units s, m, h, d). Relative dates let a test or a demo fixture
say "a reservation that ends during the run" without going stale.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from trainrun.errors import TrainrunError
from trainrun.runfile import (
    AVAILABILITY_ZONE,
    DURATION_UNITS,
    EC2_INSTANCE_TYPE,
    REGION,
    RESERVATION_GROUP_ARN,
    RESERVATION_ID,
    _inconsistent,
    _problems,
    _UniqueKeyLoader,
)

RELATIVE_DATE = r"^([+-])([0-9]+)([smhd])$"

# EC2's enums (botocore 1.44.5, ec2 2016-11-15): a typo in a fixture is an error, not a state
# no code path expects.
ReservationState = Literal[
    "active",
    "expired",
    "cancelled",
    "pending",
    "failed",
    "scheduled",
    "payment-pending",
    "payment-failed",
    "assessing",
    "delayed",
    "unsupported",
    "cancelling",
    "unavailable",
]
Platform = Literal[
    "Linux/UNIX",
    "Red Hat Enterprise Linux",
    "SUSE Linux",
    "Windows",
    "Windows with SQL Server",
    "Windows with SQL Server Enterprise",
    "Windows with SQL Server Standard",
    "Windows with SQL Server Web",
    "Linux with SQL Server Standard",
    "Linux with SQL Server Web",
    "Linux with SQL Server Enterprise",
    "RHEL with SQL Server Standard",
    "RHEL with SQL Server Enterprise",
    "RHEL with SQL Server Web",
    "RHEL with HA",
    "RHEL with HA and SQL Server Standard",
    "RHEL with HA and SQL Server Enterprise",
    "Ubuntu Pro",
]


class FixtureInvalid(TrainrunError):
    """The account fixture is not valid: its problems, each with its field path."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class FixtureReservation(_Strict):
    id: Annotated[str, StringConstraints(pattern=RESERVATION_ID)]
    instance_type: Annotated[str, StringConstraints(pattern=EC2_INSTANCE_TYPE, max_length=64)]
    availability_zone: Annotated[str, StringConstraints(pattern=AVAILABILITY_ZONE)]
    total_instance_count: Annotated[int, Field(ge=0)]
    available_instance_count: Annotated[int, Field(ge=0)]
    state: ReservationState = "active"
    start_date: AwareDatetime | None = None
    end_date: AwareDatetime | None = None
    instance_match_criteria: Literal["open", "targeted"] = "targeted"
    platform: Platform = "Linux/UNIX"
    reservation_type: Literal["default", "capacity-block"] = "default"

    @field_validator("start_date", "end_date", mode="before")
    @classmethod
    def _absolute(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, datetime):
            # YAML timestamps without an offset load as naive datetimes; EC2 dates are UTC.
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if not isinstance(value, str):
            return value
        relative = re.fullmatch(RELATIVE_DATE, value)
        if relative:
            sign, amount, unit = relative.groups()
            now = (info.context or {}).get("now") or datetime.now(UTC)
            offset = timedelta(seconds=int(amount) * DURATION_UNITS[unit])
            return now + offset if sign == "+" else now - offset
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(
                f"{value!r} is neither an ISO 8601 timestamp nor a relative duration such as +2h or -30m"
            ) from None
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)

    @model_validator(mode="after")
    def _counts(self) -> FixtureReservation:
        if self.available_instance_count > self.total_instance_count:
            raise _inconsistent(
                "available_instance_count",
                f"{self.available_instance_count} is more than total_instance_count {self.total_instance_count}",
            )
        return self


class FixtureGroup(_Strict):
    arn: Annotated[str, StringConstraints(pattern=RESERVATION_GROUP_ARN)]
    reservations: list[Annotated[str, StringConstraints(pattern=RESERVATION_ID)]] = []

    @property
    def name(self) -> str:
        return self.arn.rsplit("/", 1)[-1]

    @property
    def region(self) -> str:
        return self.arn.split(":")[3]

    @property
    def account_id(self) -> str:
        return self.arn.split(":")[4]


class FixtureObject(_Strict):
    """An S3 object the account holds: a directory of the repository, packed as a .tar.gz."""

    uri: Annotated[str, StringConstraints(pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\s]+\.(tar\.gz|tgz)$")]
    # Relative to the fixture file; load_fixture makes it absolute and checks it is a directory.
    tarball_of: str

    @field_validator("tarball_of")
    @classmethod
    def _directory(cls, value: str) -> str:
        if not Path(value).is_dir():
            raise ValueError(f"{value} is not a directory")
        return value

    @property
    def bucket(self) -> str:
        return self.uri[len("s3://") :].split("/", 1)[0]

    @property
    def key(self) -> str:
        return self.uri[len("s3://") :].split("/", 1)[1]


class AccountFixture(_Strict):
    region: Annotated[str, StringConstraints(pattern=REGION)]
    capacity_reservations: list[FixtureReservation] = []
    capacity_reservation_groups: list[FixtureGroup] = []
    s3_objects: list[FixtureObject] = []
    # Template parameters the account's stack is deployed with (e.g. RunBucketArns: the
    # buckets its run files may name), as an operator would pass them to sam deploy.
    stack_parameters: dict[str, str] = {}

    @model_validator(mode="after")
    def _consistent(self) -> AccountFixture:
        # pydantic reports one error per validator: the first inconsistency, with its field path.
        seen: set[str] = set()
        for n, reservation in enumerate(self.capacity_reservations):
            if reservation.id in seen:
                raise _inconsistent(f"capacity_reservations.{n}.id", f"{reservation.id} appears twice")
            seen.add(reservation.id)
            if not reservation.availability_zone.startswith(self.region):
                raise _inconsistent(
                    f"capacity_reservations.{n}.availability_zone",
                    f"{reservation.availability_zone} is not in region {self.region}",
                )
        arns: set[str] = set()
        for n, group in enumerate(self.capacity_reservation_groups):
            if group.arn in arns:
                raise _inconsistent(f"capacity_reservation_groups.{n}.arn", "appears twice")
            arns.add(group.arn)
            if group.region != self.region:
                raise _inconsistent(
                    f"capacity_reservation_groups.{n}.arn", f"is in {group.region}, not in region {self.region}"
                )
            unknown = [i for i in group.reservations if i not in seen]
            if unknown:
                raise _inconsistent(
                    f"capacity_reservation_groups.{n}.reservations",
                    f"{', '.join(unknown)} not in capacity_reservations",
                )
        return self


def load_fixture(path: str | Path, *, now: datetime | None = None) -> AccountFixture:
    """Read and validate an account fixture; relative dates count from `now` (default: the clock)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise FixtureInvalid([("(file)", f"cannot be read: {exc}")]) from None
    try:
        document = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise FixtureInvalid([("(file)", f"is not valid YAML: {exc}".replace("\n", " "))]) from None
    if not isinstance(document, dict):
        raise FixtureInvalid([("(file)", "must be a YAML mapping with region and capacity_reservations")])
    for entry in document.get("s3_objects") or []:
        if isinstance(entry, dict) and isinstance(entry.get("tarball_of"), str):
            entry["tarball_of"] = str((Path(path).parent / entry["tarball_of"]).resolve())
    try:
        return AccountFixture.model_validate(document, context={"now": now or datetime.now(UTC)})
    except ValidationError as exc:
        raise FixtureInvalid(_problems(exc)) from None
