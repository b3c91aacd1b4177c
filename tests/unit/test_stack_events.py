"""A local cluster stack's events as getClusterStackEvents pages them: newest first, older pages by token."""

from __future__ import annotations

import pytest

from trainrun.local import stack_events
from trainrun.local.stack_events import InvalidNextToken, ResourceEvent, StackEvents, StackResource

STACK = "trainrun-demo"
STACK_ID = f"arn:aws:cloudformation:us-west-2:123456789012:stack/{STACK}/0b6e5f10-0000-0000-0000-000000000000"
ROLE = StackResource("RoleHeadNode", "AWS::IAM::Role", f"{STACK}-RoleHeadNode-1A2B3C4D5E6F")


def statuses(page: dict) -> list[tuple[str, str]]:
    return [(e["logicalResourceId"], e["resourceStatus"]) for e in page["events"]]


def test_pages_are_newest_first_and_a_token_stays_valid_as_newer_events_come(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a stack of three events, read two at a time
    monkeypatch.setattr(stack_events, "PAGE_SIZE", 2)
    events = StackEvents(STACK, STACK_ID)
    events.stack("CREATE_IN_PROGRESS", "User Initiated")
    events.resources([ResourceEvent(ROLE, "CREATE_IN_PROGRESS"), ResourceEvent(ROLE, "CREATE_COMPLETE")])
    first = events.page(None)
    # When a newer event comes before the next page is read
    events.stack("CREATE_COMPLETE")
    second = events.page(first["nextToken"])
    # Then the pages hold each older event once, newest first, and the last page has no token
    assert statuses(first) == [("RoleHeadNode", "CREATE_COMPLETE"), ("RoleHeadNode", "CREATE_IN_PROGRESS")]
    assert statuses(second) == [(STACK, "CREATE_IN_PROGRESS")]
    assert "nextToken" not in second


def test_a_failed_create_without_a_failed_resource_fails_the_head_nodes_wait_condition() -> None:
    # Given a stack whose head node's bootstrap failed (no resource of its own failed)
    events = StackEvents(STACK, STACK_ID)
    events.stack("CREATE_IN_PROGRESS", "User Initiated")
    # When its create fails without a rollback
    events.create_failed("Cluster creation timed out.", rollback=False)
    # Then the wait condition failed with the reason, and the stack names it
    stack_failed, waited = events.page(None)["events"][:2]
    assert waited["logicalResourceId"].startswith("HeadNodeWaitCondition")
    assert (waited["resourceStatus"], waited["resourceStatusReason"]) == (
        "CREATE_FAILED",
        "Cluster creation timed out.",
    )
    assert stack_failed["resourceStatus"] == "CREATE_FAILED"
    assert stack_failed["resourceStatusReason"] == (
        f"The following resource(s) failed to create: [{waited['logicalResourceId']}]. "
    )


@pytest.mark.parametrize("token", ["not-a-token", "ZXZlbnRzOjk5"])  # the second: "events:99", past the end
def test_a_token_no_page_gave_is_refused(token: str) -> None:
    events = StackEvents(STACK, STACK_ID)
    events.stack("CREATE_IN_PROGRESS", "User Initiated")

    with pytest.raises(InvalidNextToken):
        events.page(token)
