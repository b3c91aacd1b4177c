"""The run file's optional `notify` section: where a run's state changes are also sent."""

from __future__ import annotations

import pytest

from .test_runfile import assert_problem, parse, problems_of, valid_document, with_value

TOPIC = "arn:aws:sns:us-west-2:123456789012:trainrun-runs"


def test_without_notify_a_run_sends_its_events_to_the_bus_only() -> None:
    assert parse(valid_document()).notify.sns_topic_arn is None


@pytest.mark.parametrize(
    "arn",
    [
        TOPIC,
        "arn:aws:sns:eu-central-1:123456789012:ml_team-alerts",
        "arn:aws-cn:sns:cn-north-1:123456789012:runs",
        "arn:aws-us-gov:sns:us-gov-west-1:123456789012:runs",
        "arn:aws:sns:us-west-2:123456789012:runs.fifo",
        "arn:aws:sns:us-west-2:123456789012:" + "t" * 256,
    ],
)
def test_an_sns_topic_arn_is_accepted(arn: str) -> None:
    assert parse(with_value("notify.sns_topic_arn", arn)).notify.sns_topic_arn == arn


@pytest.mark.parametrize(
    "arn",
    [
        "trainrun-runs",  # a name, not an ARN
        "arn:aws:sqs:us-west-2:123456789012:trainrun-runs",  # another service
        "arn:aws:sns:us-west-2:12345678901:trainrun-runs",  # 11 digits
        "arn:aws:sns::123456789012:trainrun-runs",  # no region
        "arn:aws:sns:us-west-2:123456789012:",  # no name
        "arn:aws:sns:us-west-2:123456789012:runs:subscription-id",  # a subscription
        "arn:aws:sns:us-west-2:123456789012:runs; echo hi",
        "arn:aws:sns:us-west-2:123456789012:" + "t" * 257,
        "arn:aws:sns:us-west-2:123456789012:runs\n",
    ],
)
def test_anything_but_an_sns_topic_arn_is_an_error_naming_the_field(arn: str) -> None:
    assert_problem(
        problems_of(with_value("notify.sns_topic_arn", arn)), "notify.sns_topic_arn", "is not the ARN of an SNS topic"
    )


def test_a_topic_arn_is_text_not_a_number() -> None:
    assert_problem(
        problems_of(with_value("notify.sns_topic_arn", 123)),
        "notify.sns_topic_arn",
        "123 is read as a number, not text",
    )


def test_an_unknown_key_in_notify_is_an_error() -> None:
    assert_problem(problems_of(with_value("notify.email", "ml@example.com")), "notify.email", "is not a known field")
