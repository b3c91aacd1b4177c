"""Deploy template.yaml onto moto: the same resources, from the template's own definitions.

Each supported resource type is created with boto3 from its template properties, so the
local stack cannot drift from the deployed one. Types the local runtime has no use for
(the layer, IAM roles, the schedule) are listed in `skipped`, never silently dropped.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainrun.local.lambdas import LocalFunction, registry
from trainrun.local.template import Resolver, TemplateError, load_template

ACCOUNT_ID = "123456789012"
_SKIPPED_TYPES = {
    "AWS::Serverless::LayerVersion": "its package is importable in this process",
    "AWS::IAM::ManagedPolicy": "enforced with the roles that attach it, by trainrun.local.iam",
    "AWS::Scheduler::Schedule": "schedules are exercised by invoking StartRunFunction with a schedule input",
}

_ALARM_NUMBERS: dict[str, Callable[[Any], int | float]] = {
    "Period": int,
    "EvaluationPeriods": int,
    "DatapointsToAlarm": int,
    "Threshold": float,
}


@dataclass
class DeployedStack:
    name: str
    region: str
    physical_ids: dict[str, str] = field(default_factory=dict)
    arns: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    parameters: dict[str, str] = field(default_factory=dict)  # every template parameter's value
    skipped: dict[str, str] = field(default_factory=dict)
    state_machine_definitions: dict[str, dict[str, Any]] = field(default_factory=dict)

    def function_name(self, logical_id: str) -> str:
        return self.physical_ids[logical_id]


class StackDeployer:
    def __init__(
        self, client: Callable[[str], Any], root: Path, stack_name: str, region: str, parameters: dict[str, str]
    ):
        self._client = client
        self._root = root
        self._template = load_template(root / "template.yaml")
        self.stack = DeployedStack(name=stack_name, region=region)
        self._resolver = Resolver(
            self._template,
            parameters=parameters,
            pseudo={
                "AWS::StackName": stack_name,
                "AWS::Region": region,
                "AWS::AccountId": ACCOUNT_ID,
                "AWS::Partition": "aws",
                "AWS::URLSuffix": "amazonaws.com",
            },
            ref=self._ref,
            get_att=self._get_att,
        )
        self.stack.parameters = self._resolver.parameters

    # --- names, as CloudFormation would generate them ----------------------------------
    def _physical_id(self, logical_id: str) -> str:
        if logical_id not in self._resources:
            function_id, event_name = self._sam_rule(logical_id)
            return self._rule_name(self._physical_id(function_id), event_name)
        kind = self._resources[logical_id]["Type"]
        suffix = logical_id.lower()
        if kind == "AWS::S3::Bucket":
            return f"{self.stack.name}-{suffix}"[:63]
        return f"{self.stack.name}-{logical_id}"[:64]

    def _arn(self, logical_id: str) -> str:
        name = self._ref_name(logical_id)
        region, account = self.stack.region, ACCOUNT_ID
        if logical_id not in self._resources:
            return f"arn:aws:events:{region}:{account}:rule/{name}"
        kind = self._resources[logical_id]["Type"]
        return {
            "AWS::S3::Bucket": f"arn:aws:s3:::{name}",
            "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{region}:{account}:table/{name}",
            "AWS::Logs::LogGroup": f"arn:aws:logs:{region}:{account}:log-group:{name}:*",
            "AWS::Serverless::Function": f"arn:aws:lambda:{region}:{account}:function:{name}",
            "AWS::Serverless::StateMachine": f"arn:aws:states:{region}:{account}:stateMachine:{name}",
            "AWS::IAM::Role": f"arn:aws:iam::{account}:role{self._iam_path(logical_id)}{name}",
            "AWS::IAM::ManagedPolicy": f"arn:aws:iam::{account}:policy{self._iam_path(logical_id)}{name}",
            "AWS::CloudWatch::Alarm": f"arn:aws:cloudwatch:{region}:{account}:alarm:{name}",
            "AWS::CloudWatch::Dashboard": f"arn:aws:cloudwatch::{account}:dashboard/{name}",
            "AWS::SQS::Queue": f"arn:aws:sqs:{region}:{account}:{name}",
        }.get(kind, f"arn:aws:local:{region}:{account}:{logical_id}")

    def _iam_path(self, logical_id: str) -> str:
        """An IAM resource's Path (IAM's default "/"): its ARN names it before the name."""
        return str(self._resolver.resolve(self._resources[logical_id].get("Properties", {}).get("Path", "/")))

    def _sam_rule(self, logical_id: str) -> tuple[str, str]:
        """The function and event of the rule SAM makes of a function's EventBridgeRule event
        (logical id <function><event>), which the template may name in Fn::GetAtt."""
        for function_id in self.typed("AWS::Serverless::Function"):
            event_name = logical_id.removeprefix(function_id)
            events = self._resources[function_id].get("Properties", {}).get("Events", {})
            if event_name != logical_id and events.get(event_name, {}).get("Type") == "EventBridgeRule":
                return function_id, event_name
        raise TemplateError(f"Ref to unknown resource or parameter {logical_id}")

    @staticmethod
    def _rule_name(target_name: str, event_name: str) -> str:
        return f"{target_name}-{event_name}"[:64]

    def _ref_name(self, logical_id: str) -> str:
        if logical_id not in self._resources:
            return self._physical_id(logical_id)
        resource = self._resources[logical_id]
        explicit = {
            "AWS::Logs::LogGroup": "LogGroupName",
            "AWS::S3::Bucket": "BucketName",
            "AWS::CloudWatch::Alarm": "AlarmName",
            "AWS::CloudWatch::Dashboard": "DashboardName",
            "AWS::Serverless::StateMachine": "Name",
        }.get(resource["Type"])
        if explicit and explicit in resource.get("Properties", {}):
            return str(self._resolver.resolve(resource["Properties"][explicit]))
        return self._physical_id(logical_id)

    def _ref(self, logical_id: str) -> str:
        if logical_id not in self._resources:
            raise TemplateError(f"Ref to unknown resource or parameter {logical_id}")
        if self._resources[logical_id]["Type"] in ("AWS::Serverless::StateMachine", "AWS::IAM::ManagedPolicy"):
            return self._arn(logical_id)
        if self._resources[logical_id]["Type"] == "AWS::SQS::Queue":
            # A queue's Ref is its URL.
            return f"https://sqs.{self.stack.region}.amazonaws.com/{ACCOUNT_ID}/{self._ref_name(logical_id)}"
        return self._ref_name(logical_id)

    def _get_att(self, logical_id: str, attribute: str) -> str:
        if attribute == "Arn":
            return self._arn(logical_id)
        if attribute in ("Name", "QueueName"):
            return self._ref_name(logical_id)
        raise TemplateError(f"the local runtime does not resolve Fn::GetAtt {logical_id}.{attribute}")

    def typed(self, *types: str) -> set[str]:
        """The logical ids of the template's resources of these types."""
        return {logical_id for logical_id, resource in self._resources.items() if resource["Type"] in types}

    def logs_to_cloudwatch(self, logical_id: str) -> bool:
        """Whether this state machine's Logging sends its execution logs to a CloudWatch Logs group."""
        logging = self._resources[logical_id].get("Properties", {}).get("Logging", {})
        return any("CloudWatchLogsLogGroup" in destination for destination in logging.get("Destinations", []))

    def resolve(self, value: Any) -> Any:
        """A template value with its intrinsic functions resolved to the deployed names."""
        return self._resolver.resolve(value)

    @property
    def _resources(self) -> dict[str, Any]:
        return self._template["Resources"]

    # --- deployment ------------------------------------------------------------------------
    def deploy(self) -> DeployedStack:
        deployers = {
            "AWS::IAM::Role": self._iam_role,
            "AWS::SQS::Queue": self._queue,
            "AWS::SQS::QueuePolicy": self._queue_policy,
            "AWS::S3::Bucket": self._bucket,
            "AWS::DynamoDB::Table": self._table,
            "AWS::Logs::LogGroup": self._log_group,
            "AWS::Serverless::Function": self._function,
            "AWS::Serverless::StateMachine": self._state_machine,
            "AWS::CloudWatch::Alarm": self._alarm,
            "AWS::CloudWatch::Dashboard": self._dashboard,
            "AWS::Lambda::Permission": self._permission,
        }
        # The queue before the functions and rules that send to it; functions before the state
        # machine that names them; the state machine before the rules and environment variables
        # that name it are used (names are known up front).
        order = list(deployers)
        resources = sorted(
            self._resources.items(),
            key=lambda item: order.index(item[1]["Type"]) if item[1]["Type"] in order else len(order),
        )
        self._role_arn = self._role()
        for logical_id, resource in resources:
            condition = resource.get("Condition")
            if condition and not self._resolver.conditions[condition]:
                continue
            kind = resource["Type"]
            if kind in _SKIPPED_TYPES:
                self.stack.skipped[logical_id] = _SKIPPED_TYPES[kind]
                continue
            if kind not in deployers:
                raise TemplateError(
                    f"{logical_id}: the local runtime cannot deploy {kind}; teach trainrun.local.template_deployer"
                )
            properties = self._resolver.resolve(resource.get("Properties", {}))
            deployers[kind](logical_id, properties)
            self.stack.physical_ids[logical_id] = self._ref_name(logical_id)
            self.stack.arns[logical_id] = self._arn(logical_id)
        for name, output in self._template.get("Outputs", {}).items():
            self.stack.outputs[name] = str(self._resolver.resolve(output["Value"]))
        return self.stack

    def _role(self) -> str:
        iam = self._client("iam")
        name = f"{self.stack.name}-local-functions"
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
            ],
        }
        return iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]

    def _iam_role(self, logical_id: str, properties: dict[str, Any]) -> None:
        """The role with its path and trust policy, for the local services that check a role they
        are passed as AWS does (the local EKS: that it exists and trusts eks.amazonaws.com). What it
        may do is trainrun.local.iam's to enforce, from the template: no policy is attached here."""
        self._client("iam").create_role(
            RoleName=self._ref_name(logical_id),
            Path=self._iam_path(logical_id),
            AssumeRolePolicyDocument=json.dumps(properties["AssumeRolePolicyDocument"]),
        )

    def _bucket(self, logical_id: str, properties: dict[str, Any]) -> None:
        s3 = self._client("s3")
        name = self._ref_name(logical_id)
        kwargs: dict[str, Any] = {"Bucket": name}
        if self.stack.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.stack.region}
        s3.create_bucket(**kwargs)
        if properties.get("VersioningConfiguration", {}).get("Status") == "Enabled":
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        notification = properties.get("NotificationConfiguration", {})
        if notification.get("EventBridgeConfiguration", {}).get("EventBridgeEnabled"):
            s3.put_bucket_notification_configuration(
                Bucket=name, NotificationConfiguration={"EventBridgeConfiguration": {}}
            )

    def _queue(self, logical_id: str, properties: dict[str, Any]) -> None:
        # The template's properties are CreateQueue's attributes (all strings in the API).
        attributes = {
            key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in properties.items()
        }
        self._client("sqs").create_queue(QueueName=self._ref_name(logical_id), Attributes=attributes)

    def _queue_policy(self, logical_id: str, properties: dict[str, Any]) -> None:
        sqs = self._client("sqs")
        for url in properties["Queues"]:
            queue_url = sqs.get_queue_url(QueueName=url.rsplit("/", 1)[-1])["QueueUrl"]
            sqs.set_queue_attributes(
                QueueUrl=queue_url, Attributes={"Policy": json.dumps(properties["PolicyDocument"])}
            )

    def _table(self, logical_id: str, properties: dict[str, Any]) -> None:
        self._client("dynamodb").create_table(
            TableName=self._ref_name(logical_id),
            AttributeDefinitions=properties["AttributeDefinitions"],
            KeySchema=properties["KeySchema"],
            BillingMode=properties.get("BillingMode", "PROVISIONED"),
        )

    def _log_group(self, logical_id: str, properties: dict[str, Any]) -> None:
        logs = self._client("logs")
        name = self._ref_name(logical_id)
        logs.create_log_group(logGroupName=name)
        if "RetentionInDays" in properties:
            logs.put_retention_policy(logGroupName=name, retentionInDays=int(properties["RetentionInDays"]))

    def _function(self, logical_id: str, properties: dict[str, Any]) -> None:
        globals_ = self._resolver.resolve(self._template.get("Globals", {}).get("Function", {}))
        merged = {**globals_, **properties}
        environment = {
            **globals_.get("Environment", {}).get("Variables", {}),
            **properties.get("Environment", {}).get("Variables", {}),
        }
        name = self._ref_name(logical_id)
        self._client("lambda").create_function(
            FunctionName=name,
            Runtime=merged["Runtime"],
            Role=self._role_arn,
            Handler=merged["Handler"],
            Code={"ZipFile": _placeholder_zip()},
            Timeout=int(merged.get("Timeout", 3)),
            MemorySize=int(merged.get("MemorySize", 128)),
            Architectures=merged.get("Architectures", ["x86_64"]),
            Environment={"Variables": {k: str(v) for k, v in environment.items()}},
        )
        invoke_config = dict(properties.get("EventInvokeConfig", {}))
        if invoke_config:
            # What becomes of an asynchronous invocation that fails (trainrun.local.lambdas). SAM's
            # destinations carry a Type of their own that Lambda's API does not take.
            destinations = invoke_config.pop("DestinationConfig", {})
            invoke_config["DestinationConfig"] = {
                outcome: {"Destination": destination["Destination"]} for outcome, destination in destinations.items()
            }
            self._client("lambda").put_function_event_invoke_config(FunctionName=name, **invoke_config)
        registry.register(
            LocalFunction(
                name=name,
                arn=self._arn(logical_id),
                code_dir=self._root / merged["CodeUri"],
                handler=merged["Handler"],
                environment={k: str(v) for k, v in environment.items()},
                memory_mb=int(merged.get("MemorySize", 128)),
            )
        )
        self._event_sources(logical_id, name, properties)

    def _state_machine(self, logical_id: str, properties: dict[str, Any]) -> None:
        text = (self._root / properties["DefinitionUri"]).read_text()
        for key, value in properties.get("DefinitionSubstitutions", {}).items():
            text = text.replace("${" + key + "}", str(value))
        definition = json.loads(text)
        self.stack.state_machine_definitions[logical_id] = definition
        name = self._ref_name(logical_id)
        self._client("stepfunctions").create_state_machine(
            name=name,
            definition=json.dumps(definition),
            # The role SAM creates for it (<logical id>Role): Step Functions invokes the functions as it.
            roleArn=f"arn:aws:iam::{ACCOUNT_ID}:role/{self.stack.name}-{logical_id}Role",
            type=properties.get("Type", "STANDARD"),
            # With tracing on, Step Functions sends each execution's trace to X-Ray as this role.
            tracingConfiguration={"enabled": bool(properties.get("Tracing", {}).get("Enabled", False))},
        )
        self._event_sources(logical_id, name, properties)

    def _alarm(self, logical_id: str, properties: dict[str, Any]) -> None:
        # The template's properties are PutMetricAlarm's parameters; numbers may come from parameters (strings).
        request = {**properties, "AlarmName": self._ref_name(logical_id)}
        for key, number in _ALARM_NUMBERS.items():
            if key in request:
                request[key] = number(request[key])
        self._client("cloudwatch").put_metric_alarm(**request)

    def _dashboard(self, logical_id: str, properties: dict[str, Any]) -> None:
        self._client("cloudwatch").put_dashboard(
            DashboardName=self._ref_name(logical_id), DashboardBody=properties["DashboardBody"]
        )

    def _permission(self, logical_id: str, properties: dict[str, Any]) -> None:
        """A statement of a function's resource policy (CloudWatch Logs asks it before it accepts
        a subscription to the function: trainrun.local.log_subscriptions)."""
        optional = {key: properties[key] for key in ("SourceArn", "SourceAccount") if key in properties}
        self._client("lambda").add_permission(
            FunctionName=properties["FunctionName"],
            StatementId=logical_id,
            Action=properties["Action"],
            Principal=properties["Principal"],
            **optional,
        )

    def _event_sources(self, logical_id: str, name: str, properties: dict[str, Any]) -> None:
        """SAM `Events` of a function or state machine: EventBridge rules and log subscriptions
        are deployed, schedules skipped."""
        for event_name, event in properties.get("Events", {}).items():
            if event["Type"] == "ScheduleV2":
                self.stack.skipped[f"{logical_id}.Events.{event_name}"] = (
                    "schedules do not fire on their own locally; LocalRuntime.fire_schedule fires one as its role"
                )
                continue
            if event["Type"] == "CloudWatchLogs":
                # The permission SAM adds for the event (samtranslator's CloudWatchLogs event
                # source), without which CloudWatch Logs refuses the subscription.
                group = event["Properties"]["LogGroupName"]
                self._permission(
                    f"{logical_id}{event_name}Permission",
                    {
                        "FunctionName": self._arn(logical_id),
                        "Action": "lambda:InvokeFunction",
                        "Principal": "logs.amazonaws.com",
                        "SourceArn": f"arn:aws:logs:{self.stack.region}:{ACCOUNT_ID}:log-group:{group}:*",
                    },
                )
                # moto invokes the function in the PutLogEvents call that writes to the group.
                self._client("logs").put_subscription_filter(
                    logGroupName=event["Properties"]["LogGroupName"],
                    filterName=f"{name}-{event_name}"[:512],
                    filterPattern=event["Properties"].get("FilterPattern", ""),
                    destinationArn=self._arn(logical_id),
                )
                continue
            if event["Type"] != "EventBridgeRule":
                raise TemplateError(
                    f"{logical_id}.Events.{event_name}: the local runtime cannot deploy {event['Type']}"
                )
            events = self._client("events")
            rule_name = self._rule_name(name, event_name)
            events.put_rule(Name=rule_name, EventPattern=json.dumps(event["Properties"]["Pattern"]), State="ENABLED")
            target = {"Id": "target", "Arn": self._arn(logical_id)}
            if ":states:" in target["Arn"]:
                # EventBridge starts a state machine as the role SAM creates for the rule
                # (<logical id><event name>Role); a function target needs none (its resource policy).
                target["RoleArn"] = f"arn:aws:iam::{ACCOUNT_ID}:role/{self.stack.name}-{logical_id}{event_name}Role"
            for key in ("InputPath", "RetryPolicy", "DeadLetterConfig"):
                if key in event["Properties"]:
                    target[key] = event["Properties"][key]
            events.put_targets(Rule=rule_name, Targets=[target])


def _placeholder_zip() -> bytes:
    # moto wants a code package; the code that runs is the function's directory in this repo.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "# dispatched in-process by trainrun.local.lambdas\n")
    return buffer.getvalue()
