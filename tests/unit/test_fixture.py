"""The local account fixture: loading, dates, and problems named by field path."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.errors import TrainrunError
from trainrun.local.fixture import FixtureGitRepository, FixtureInvalid, build_git_repositories, load_fixture

EXAMPLE_ACCOUNT = Path(__file__).resolve().parents[2] / "examples" / "accounts" / "default.yaml"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GROUP_ARN = "arn:aws:resource-groups:us-west-2:123456789012:group/trn1-pool"


def document(**reservation_fields: Any) -> dict[str, Any]:
    return {
        "region": "us-west-2",
        "capacity_reservations": [
            {
                "id": "cr-0123456789abcdef0",
                "instance_type": "trn1.32xlarge",
                "availability_zone": "us-west-2d",
                "total_instance_count": 16,
                "available_instance_count": 16,
                **reservation_fields,
            }
        ],
        "capacity_reservation_groups": [{"arn": GROUP_ARN, "reservations": ["cr-0123456789abcdef0"]}],
    }


def written(tmp_path: Path, content: dict[str, Any] | str) -> Path:
    path = tmp_path / "account.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content), encoding="utf-8")
    return path


def problems_of(path: Path) -> dict[str, str]:
    with pytest.raises(FixtureInvalid) as raised:
        load_fixture(path, now=NOW)
    return dict(raised.value.problems)


def test_the_example_account_loads() -> None:
    # Given the default local account
    fixture = load_fixture(EXAMPLE_ACCOUNT)
    # Then it holds a targeted trn1.32xlarge x16 reservation in us-west-2d, and a group with it
    (reservation,) = fixture.capacity_reservations
    assert reservation.id == "cr-0123456789abcdef0"
    assert (reservation.instance_type, reservation.availability_zone) == ("trn1.32xlarge", "us-west-2d")
    assert (reservation.total_instance_count, reservation.available_instance_count) == (16, 16)
    assert (reservation.state, reservation.instance_match_criteria, reservation.platform) == (
        "active",
        "targeted",
        "Linux/UNIX",
    )
    assert reservation.end_date is None
    assert [(g.arn, g.reservations) for g in fixture.capacity_reservation_groups] == [
        (GROUP_ARN, ["cr-0123456789abcdef0"])
    ]


def test_fixture_invalid_is_a_trainrun_error() -> None:
    assert issubclass(FixtureInvalid, TrainrunError)


def test_an_unknown_key_is_named(tmp_path: Path) -> None:
    problems = problems_of(written(tmp_path, document(owner="someone")))
    assert problems == {"capacity_reservations.0.owner": "is not a known field"}


def test_an_unknown_state_is_named(tmp_path: Path) -> None:
    problems = problems_of(written(tmp_path, document(state="running")))
    assert list(problems) == ["capacity_reservations.0.state"]
    assert "'active'" in problems["capacity_reservations.0.state"]


def test_an_unknown_match_criteria_is_named(tmp_path: Path) -> None:
    problems = problems_of(written(tmp_path, document(instance_match_criteria="strict")))
    assert list(problems) == ["capacity_reservations.0.instance_match_criteria"]


def test_a_count_given_as_text_is_refused(tmp_path: Path) -> None:
    problems = problems_of(written(tmp_path, document(total_instance_count="16")))
    assert list(problems) == ["capacity_reservations.0.total_instance_count"]


def test_a_relative_end_date_counts_from_now(tmp_path: Path) -> None:
    fixture = load_fixture(written(tmp_path, document(end_date="+2h")), now=NOW)
    assert fixture.capacity_reservations[0].end_date == NOW + timedelta(hours=2)


def test_a_negative_relative_end_date_is_in_the_past(tmp_path: Path) -> None:
    fixture = load_fixture(written(tmp_path, document(end_date="-30m")), now=NOW)
    assert fixture.capacity_reservations[0].end_date == NOW - timedelta(minutes=30)


def test_an_iso_end_date_without_offset_is_utc(tmp_path: Path) -> None:
    fixture = load_fixture(written(tmp_path, document(end_date="2026-04-01T00:00:00")), now=NOW)
    assert fixture.capacity_reservations[0].end_date == datetime(2026, 4, 1, tzinfo=UTC)


def test_a_yaml_timestamp_end_date_is_accepted(tmp_path: Path) -> None:
    text = yaml.safe_dump(document()).replace("id: cr-", "end_date: 2026-04-01T00:00:00Z\n  id: cr-")
    fixture = load_fixture(written(tmp_path, text), now=NOW)
    assert fixture.capacity_reservations[0].end_date == datetime(2026, 4, 1, tzinfo=UTC)


def test_an_end_date_that_is_no_date_is_named(tmp_path: Path) -> None:
    problems = problems_of(written(tmp_path, document(end_date="tomorrow")))
    assert "relative duration such as +2h" in problems["capacity_reservations.0.end_date"]


def test_more_available_than_total_is_refused(tmp_path: Path) -> None:
    problems = problems_of(written(tmp_path, document(available_instance_count=17)))
    assert problems == {"capacity_reservations.0.available_instance_count": "17 is more than total_instance_count 16"}


def test_a_reservation_outside_the_region_is_refused(tmp_path: Path) -> None:
    problems = problems_of(written(tmp_path, document(availability_zone="us-east-1a")))
    assert problems == {"capacity_reservations.0.availability_zone": "us-east-1a is not in region us-west-2"}


def test_a_group_naming_an_unknown_reservation_is_refused(tmp_path: Path) -> None:
    content = document()
    content["capacity_reservation_groups"][0]["reservations"].append("cr-0123456789abcdef1")
    problems = problems_of(written(tmp_path, content))
    assert problems == {
        "capacity_reservation_groups.0.reservations": "cr-0123456789abcdef1 not in capacity_reservations"
    }


def test_duplicate_reservation_ids_are_refused(tmp_path: Path) -> None:
    content = document()
    content["capacity_reservations"] *= 2
    problems = problems_of(written(tmp_path, content))
    assert problems == {"capacity_reservations.1.id": "cr-0123456789abcdef0 appears twice"}


def test_a_group_in_another_region_is_refused(tmp_path: Path) -> None:
    content = document()
    content["capacity_reservation_groups"][0]["arn"] = GROUP_ARN.replace("us-west-2", "us-east-1")
    problems = problems_of(written(tmp_path, content))
    assert problems == {"capacity_reservation_groups.0.arn": "is in us-east-1, not in region us-west-2"}


def test_a_duplicate_yaml_key_is_refused(tmp_path: Path) -> None:
    problems = problems_of(written(tmp_path, "region: us-west-2\nregion: us-east-1\n"))
    assert "duplicate key 'region'" in problems["(file)"]


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    assert "must be a YAML mapping" in problems_of(written(tmp_path, "- region\n"))["(file)"]


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    assert "cannot be read" in problems_of(tmp_path / "absent.yaml")["(file)"]


def test_an_s3_object_is_packed_from_a_directory_relative_to_the_fixture(tmp_path: Path) -> None:
    (tmp_path / "workload").mkdir()
    content = document()
    content["s3_objects"] = [{"uri": "s3://examples/workload.tar.gz", "tarball_of": "workload"}]
    fixture = load_fixture(written(tmp_path, content))
    (item,) = fixture.s3_objects
    assert (item.bucket, item.key) == ("examples", "workload.tar.gz")
    assert item.tarball_of == str(tmp_path / "workload")


def test_an_s3_object_from_a_missing_directory_is_named(tmp_path: Path) -> None:
    content = document()
    content["s3_objects"] = [{"uri": "s3://examples/workload.tar.gz", "tarball_of": "nowhere"}]
    assert "is not a directory" in problems_of(written(tmp_path, content))["s3_objects.0.tarball_of"]


def test_an_s3_object_that_is_not_a_tarball_uri_is_named(tmp_path: Path) -> None:
    (tmp_path / "workload").mkdir()
    content = document()
    content["s3_objects"] = [{"uri": "https://example.com/w.zip", "tarball_of": "workload"}]
    assert "s3_objects.0.uri" in problems_of(written(tmp_path, content))


def test_an_uncompressed_tar_object_is_packed_as_a_plain_tar(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    content = document()
    content["s3_objects"] = [{"uri": "s3://neuron-s3/datasets/shards.tar", "tarball_of": "data"}]
    (item,) = load_fixture(written(tmp_path, content)).s3_objects
    assert item.compressed is False


def test_a_git_repository_stands_in_for_its_url_from_a_directory_relative_to_the_fixture(tmp_path: Path) -> None:
    (tmp_path / "samples").mkdir()
    content = document()
    content["git_repositories"] = [
        {"url": "https://github.com/aws-neuron/aws-neuron-samples.git", "branch": "master", "tree_of": "samples"}
    ]
    (repository,) = load_fixture(written(tmp_path, content)).git_repositories
    assert repository.tree_of == str(tmp_path / "samples")
    assert repository.branch == "master"


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("tree_of", "nowhere", "is not a directory"),
        ("branch", "-x", "is not a branch, tag or commit"),
        ("url", "git@host:x.git", "pattern"),
    ],
)
def test_a_bad_git_repository_is_named_with_its_field(tmp_path: Path, field: str, value: str, problem: str) -> None:
    (tmp_path / "samples").mkdir()
    content = document()
    entry = {"url": "https://github.com/aws-neuron/aws-neuron-samples.git", "tree_of": "samples", field: value}
    content["git_repositories"] = [entry]
    assert problem in problems_of(written(tmp_path, content))[f"git_repositories.0.{field}"]


def test_a_stand_in_repository_is_cloned_at_its_branch_with_the_directorys_files(tmp_path: Path) -> None:
    tree = tmp_path / "samples"
    (tree / "training").mkdir(parents=True)
    (tree / "training" / "run.sh").write_text("echo stand-in\n")
    repository = FixtureGitRepository(url="https://github.com/org/samples.git", branch="master", tree_of=str(tree))

    rewrites = build_git_repositories([repository], tmp_path / "git")

    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "--quiet", "--branch", "master", rewrites[repository.url], str(clone)],
        check=True,
        capture_output=True,
    )
    assert (clone / "training" / "run.sh").read_text() == "echo stand-in\n"


def test_the_example_account_stands_in_for_the_bert_examples_source_and_dataset() -> None:
    fixture = load_fixture(EXAMPLE_ACCOUNT)
    bert = yaml.safe_load((EXAMPLE_ACCOUNT.parents[1] / "bert-large-phase1.yaml").read_text())["workload"]
    assert bert["source"]["git"] in {r.url for r in fixture.git_repositories}
    assert bert["dataset"]["source"] in {item.uri for item in fixture.s3_objects}


def test_a_reservation_without_a_state_takes_it_from_its_dates(tmp_path: Path) -> None:
    fixture = load_fixture(written(tmp_path, document(start_date="+2m", end_date="+1h")), now=NOW)
    (reservation,) = fixture.capacity_reservations
    assert reservation.state_at(NOW) == "scheduled" and reservation.available_at(NOW) == 0
    assert reservation.state_at(NOW + timedelta(minutes=2)) == "active"
    assert reservation.available_at(NOW + timedelta(minutes=2)) == 16
    assert reservation.state_at(NOW + timedelta(hours=1)) == "expired"


def test_a_state_outside_the_dated_life_stays_as_it_is(tmp_path: Path) -> None:
    fixture = load_fixture(written(tmp_path, document(state="payment-pending", start_date="-2m")), now=NOW)
    assert fixture.capacity_reservations[0].state_at(NOW) == "payment-pending"


def test_an_active_reservation_that_has_not_started_is_refused(tmp_path: Path) -> None:
    problems = problems_of(written(tmp_path, document(state="active", start_date="+2m")))
    assert "scheduled until it starts" in problems["capacity_reservations.0.state"]
