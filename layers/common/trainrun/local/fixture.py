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

The dates move the reservation along as EC2 does (`FixtureReservation.state_at`): a reservation
is `scheduled` before its `start_date` (with no capacity available, and no instance can launch
into it), `active` from then, and `expired` from its `end_date`. `state` may be left out (it
follows from the dates); a state that is not part of that life (payment-pending, cancelled, ...)
stays as it is.

What an example run fetches from outside the account comes from the fixture too, so a local run
needs no network: `s3_objects` (a directory packed as a .tar.gz, .tgz or .tar at an S3 URI) and
`git_repositories` (a directory committed to a local repository that the head node's git clones
instead of the URL, through `url.<base>.insteadOf`):

    git_repositories:
      - {url: https://github.com/aws-neuron/aws-neuron-samples.git, branch: master,
         tree_of: ../local-aws-neuron-samples}
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
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
from trainrun.model.run_file import (
    AVAILABILITY_ZONE,
    DURATION_UNITS,
    EC2_INSTANCE_TYPE,
    GIT_REF,
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
    # None: as the dates say at load time (see state_at).
    state: ReservationState | None = None
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
                (
                    "available_instance_count",
                    f"{self.available_instance_count} is more than total_instance_count {self.total_instance_count}",
                )
            )
        return self

    @model_validator(mode="after")
    def _started(self, info: ValidationInfo) -> FixtureReservation:
        now = (info.context or {}).get("now") or datetime.now(UTC)
        if self.state == "active" and self.start_date is not None and self.start_date > now:
            raise _inconsistent(
                (
                    "state",
                    "is active, but start_date is in the future: EC2 describes a reservation as scheduled until it "
                    "starts (leave state out)",
                )
            )
        return self

    def state_at(self, now: datetime) -> str:
        """The state EC2 describes at `now`: scheduled until start_date, active until end_date, then expired."""
        state = self.state or ("scheduled" if self.start_date is not None and now < self.start_date else "active")
        if state == "scheduled" and self.start_date is not None and now >= self.start_date:
            state = "active"
        if state == "active" and self.end_date is not None and now >= self.end_date:
            state = "expired"
        return state

    def available_at(self, now: datetime) -> int:
        """Instances available at `now`: none unless active (EC2 shows a Capacity Block's available
        capacity as zero before it starts: Amazon EC2 User Guide, "View Capacity Blocks")."""
        return self.available_instance_count if self.state_at(now) == "active" else 0


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


def _directory(value: str) -> str:
    if not Path(value).is_dir():
        raise ValueError(f"{value} is not a directory")
    return value


class FixtureObject(_Strict):
    """An S3 object the account holds: a directory of the repository, packed as a .tar.gz (or
    a .tar, as the uri says), its entries at the top of the archive."""

    uri: Annotated[str, StringConstraints(pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\s]+\.(tar\.gz|tgz|tar)$")]
    # Relative to the fixture file; load_fixture makes it absolute and checks it is a directory.
    tarball_of: str
    # The size of the real object this one stands for: on the AWS clock (`trainrun local
    # --aws-clock`), a dataset's copy onto the file system takes as long as copying that many bytes.
    size_on_aws_bytes: Annotated[int, Field(gt=0)] | None = None

    _is_directory = field_validator("tarball_of")(_directory)

    @property
    def compressed(self) -> bool:
        return not self.uri.endswith(".tar")

    @property
    def bucket(self) -> str:
        return self.uri[len("s3://") :].split("/", 1)[0]

    @property
    def key(self) -> str:
        return self.uri[len("s3://") :].split("/", 1)[1]


class FixtureGitRepository(_Strict):
    """A git repository the local head node clones instead of `url` (git's url.<base>.insteadOf):
    a directory of the repository, committed as the one commit of `branch`."""

    url: Annotated[str, StringConstraints(pattern=r"^https://[A-Za-z0-9.-]+/[A-Za-z0-9._~/-]+$")]
    branch: Annotated[str, StringConstraints(pattern=GIT_REF)] = "main"
    # Relative to the fixture file, as tarball_of.
    tree_of: str

    _is_directory = field_validator("tree_of")(_directory)


class AccountFixture(_Strict):
    region: Annotated[str, StringConstraints(pattern=REGION)]
    capacity_reservations: list[FixtureReservation] = []
    capacity_reservation_groups: list[FixtureGroup] = []
    s3_objects: list[FixtureObject] = []
    # Template parameters the account's stack is deployed with (e.g. RunBucketArns: the
    # buckets its run files may name), as an operator would pass them to sam deploy.
    stack_parameters: dict[str, str] = {}
    git_repositories: list[FixtureGitRepository] = []

    @model_validator(mode="after")
    def _consistent(self) -> AccountFixture:
        # pydantic reports one error per validator: the first inconsistency, with its field path.
        seen: set[str] = set()
        for n, reservation in enumerate(self.capacity_reservations):
            if reservation.id in seen:
                raise _inconsistent((f"capacity_reservations.{n}.id", f"{reservation.id} appears twice"))
            seen.add(reservation.id)
            if not reservation.availability_zone.startswith(self.region):
                raise _inconsistent(
                    (
                        f"capacity_reservations.{n}.availability_zone",
                        f"{reservation.availability_zone} is not in region {self.region}",
                    )
                )
        arns: set[str] = set()
        for n, group in enumerate(self.capacity_reservation_groups):
            if group.arn in arns:
                raise _inconsistent((f"capacity_reservation_groups.{n}.arn", "appears twice"))
            arns.add(group.arn)
            if group.region != self.region:
                raise _inconsistent(
                    (f"capacity_reservation_groups.{n}.arn", f"is in {group.region}, not in region {self.region}")
                )
            unknown = [i for i in group.reservations if i not in seen]
            if unknown:
                raise _inconsistent(
                    (
                        f"capacity_reservation_groups.{n}.reservations",
                        f"{', '.join(unknown)} not in capacity_reservations",
                    )
                )
        return self


def resolve_directories(document: dict[str, Any], base: Path) -> None:
    """Make the directories a fixture document names (tarball_of, tree_of) absolute, from `base`:
    for a fixture read from one place and written to another."""
    for section, key in (("s3_objects", "tarball_of"), ("git_repositories", "tree_of")):
        for entry in document.get(section) or []:
            if isinstance(entry, dict) and isinstance(entry.get(key), str):
                entry[key] = str((base / entry[key]).resolve())


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
    resolve_directories(document, Path(path).parent)
    try:
        return AccountFixture.model_validate(document, context={"now": now or datetime.now(UTC)})
    except ValidationError as exc:
        raise FixtureInvalid([(problem.path, problem.message) for problem in _problems(exc, AccountFixture)]) from None


def build_git_repositories(repositories: list[FixtureGitRepository], root: Path) -> dict[str, str]:
    """A bare repository under `root` for each of `repositories`; {real URL: file:// URL of its stand-in}.

    Each holds one commit of its directory's files on its branch, with a fixed author and date,
    so the same directory always gives the same commit.
    """
    rewrites: dict[str, str] = {}
    for n, repository in enumerate(repositories):
        bare = root / f"{n}.git"
        work = root / f"{n}.work"
        shutil.copytree(repository.tree_of, work, ignore=shutil.ignore_patterns("__pycache__", ".git"))
        environment = {
            **os.environ,
            "GIT_AUTHOR_NAME": "trainrun fixture",
            "GIT_AUTHOR_EMAIL": "fixture@trainrun.invalid",
            "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
            "GIT_COMMITTER_NAME": "trainrun fixture",
            "GIT_COMMITTER_EMAIL": "fixture@trainrun.invalid",
            "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        for argv in (
            ["git", "init", "--quiet", f"--initial-branch={repository.branch}", str(work)],
            ["git", "-C", str(work), "add", "--all"],
            ["git", "-C", str(work), "commit", "--quiet", "--message", f"stand-in for {repository.url}"],
            ["git", "clone", "--quiet", "--bare", str(work), str(bare)],
        ):
            subprocess.run(argv, check=True, capture_output=True, env=environment)  # noqa: S603 - fixed argv
        shutil.rmtree(work)
        rewrites[repository.url] = bare.as_uri()
    return rewrites
