"""SSM as it behaves on AWS: an agent that registers late, and commands that outlast a function's wait.

The local SSM stand-in refuses SendCommand with InvalidInstanceId until the head node's agent is
online, and can hold every command InProgress longer than the sending function waits; a run
must still succeed, through the state machine's retries.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import trainrun.steps.head_node
from trainrun.local import ssm_emulator
from trainrun.local.pcluster_api import DEFAULT_AMI_ID
from trainrun.local.runtime import LocalRuntime

from .conftest import example, run_to_end
from .scripted_head_node import ScriptedCluster


def failed_attempts(runtime: LocalRuntime, execution_arn: str) -> list[str]:
    """The error names of the execution's failed Lambda attempts (each retried, or caught)."""
    sfn = runtime.client("stepfunctions")
    errors: list[str] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn):
        for event in page["events"]:
            for key, details in event.items():
                if key.endswith("FailedEventDetails") and isinstance(details, dict) and "error" in details:
                    errors.append(str(details["error"]))
    return errors


def test_a_run_waits_for_the_head_nodes_ssm_agent_to_register(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a head node whose SSM agent comes online a few seconds after the cluster is complete
    monkeypatch.setattr(ssm_emulator, "AGENT_REGISTRATION_SECONDS", 4.0)
    # When a run goes through
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then SendCommand was refused at first (InvalidInstanceId), retried, and the run succeeded
    assert summary.status == "SUCCEEDED", summary.error
    assert "InstanceNotReachable" in failed_attempts(runtime, started.execution_arn)


def test_a_submit_command_that_outlasts_the_functions_wait_is_looked_at_again(
    runtime: LocalRuntime, cluster: ScriptedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given commands that stay InProgress longer than the submitting function waits
    monkeypatch.setattr(trainrun.steps.head_node, "SHORT_COMMAND_SECONDS", 0.5)
    ssm_emulator.command_seconds = 1.5
    # When a run goes through
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then the submit was looked at again after the wait (not failed, not sent twice), and the run succeeded
    assert summary.status == "SUCCEEDED", summary.error
    assert "SubmitStillRunning" in failed_attempts(runtime, started.execution_arn)
    (head_node,) = cluster.head_nodes
    submits = [script.splitlines()[0] for script in head_node.scripts if script.startswith("# trainrun: submit")]
    assert sorted(submits) == sorted(set(submits)) and len(submits) == 2  # compile and train, once each


def test_the_stand_in_refuses_commands_until_the_agent_is_online(runtime: LocalRuntime) -> None:
    class Runner:
        def run_script(self, script: str, run: Any) -> None:
            run.stdout, run.status, run.response_code = "ok\n", "Success", 0

    client = runtime.client("ssm")
    ssm_emulator.register_head_node("i-0123456789abcdef0", Runner(), agent_registers_in=60)
    with pytest.raises(client.exceptions.ClientError) as raised:
        client.send_command(
            InstanceIds=["i-0123456789abcdef0"], DocumentName="AWS-RunShellScript", Parameters={"commands": ["true"]}
        )
    assert raised.value.response["Error"]["Code"] == "InvalidInstanceId"
    assert json.dumps(raised.value.response["Error"]["Message"]).find("not in a valid state") > 0
    ssm_emulator.register_head_node("i-0123456789abcdef0", Runner(), agent_registers_in=0)
    sent = client.send_command(
        InstanceIds=["i-0123456789abcdef0"], DocumentName="AWS-RunShellScript", Parameters={"commands": ["true"]}
    )
    assert sent["Command"]["CommandId"]


def test_a_command_runs_only_on_the_instances_it_names_not_on_every_instance_of_the_account(
    runtime: LocalRuntime,
) -> None:
    # Given two running instances, each a head node whose agent is online
    ec2 = runtime.client("ec2")
    image = DEFAULT_AMI_ID  # the local ParallelCluster's (moto loads no catalogue of images)
    launched = ec2.run_instances(ImageId=image, MinCount=2, MaxCount=2, InstanceType="t3.micro")["Instances"]
    named, other = (instance["InstanceId"] for instance in launched)
    ran: dict[str, list[str]] = {named: [], other: []}

    class Runner:
        def __init__(self, instance_id: str):
            self.instance_id = instance_id

        def run_script(self, script: str, run: Any) -> None:
            ran[self.instance_id].append(script)
            run.stdout, run.status, run.response_code = "ok\n", "Success", 0

    for instance_id in ran:
        ssm_emulator.register_head_node(instance_id, Runner(instance_id), agent_registers_in=0)
    # When a command names one of them
    client = runtime.client("ssm")
    sent = client.send_command(
        InstanceIds=[named], DocumentName="AWS-RunShellScript", Parameters={"commands": ["echo one"]}
    )["Command"]
    # Then it runs there only, and says so (SSM's SendCommand: "The IDs of the managed nodes where
    # the command should run"; moto 5.2.5 adds every instance of the region when Targets is empty)
    assert sent["InstanceIds"] == [named]
    deadline = time.monotonic() + 10
    while not ran[named] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ran == {named: ["echo one"], other: []}
