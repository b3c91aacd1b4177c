"""A local ParallelCluster API: the official REST contract on loopback, nodes launched in moto.

`trainrun local` and the workflow harness point `PclusterApiUrl` here. It answers createCluster,
describeCluster, updateComputeFleet (a stop), deleteCluster and listClusters with the status codes and bodies of
ParallelCluster 3.16's OpenAPI spec (tests/pcluster checks every answer against it), behind an
API Gateway-like check that each request carries a SigV4 Authorization header, and the official
API stack's resource policy: only the API's user role (`api_user_role_arn`, the stack's
`ParallelClusterApiUserRole` output) may invoke it, so a request must be signed with credentials
of a live session of that role, which moto's STS issued (AssumeRole); any other principal gets
API Gateway's 403 "User: ... is not authorized to perform: execute-api:Invoke". The signature
itself is not recomputed: the point is the principal the request is signed as.

A cluster's life is simulated: create checks the configuration's essentials and launches the
head node and the static compute nodes as EC2 instances tagged as ParallelCluster tags them;
describe answers CREATE_IN_PROGRESS, then CREATE_COMPLETE after a few describes or seconds;
delete terminates the instances and the cluster is gone after a few more. `fail_next_create`
makes the next create end CREATE_FAILED with the failures given, as pcluster's `failures[]`;
`fail_next_delete` makes the next delete end DELETE_FAILED with the nodes still running (as a
CloudFormation stack whose deletion failed leaves what it could not delete), until deleted again.
The head node (the `ClusterLifecycle`) may set the compute fleet's status: PROTECTED when its
queue enters protected mode after repeated compute node bootstrap failures; describeCluster's
computeFleetStatus then says it while the cluster stays CREATE_COMPLETE, as on AWS, where
clustermgtd records it with update-compute-fleet-status.sh in the cluster's DynamoDB table
(aws-parallelcluster-node, clustermgtd.py; aws-parallelcluster-cookbook, compute fleet status).

Where the running ParallelCluster 3.16.1 differs from its spec, this follows the running one:
an existing name on create is 400 "Cluster <name> already exists." (the spec lists 409;
`existing_cluster_status=409` answers that instead).

On the AWS clock (`timing`, from trainrun.local.clock and trainrun.logic.aws_clock) a create
takes AWS's time instead: the stack's resources, the head node's boot and its custom action
(OnNodeConfigured) take the table's time or the local head node's, the longer; the static
compute nodes launch on clustermgtd's next loop after that (ParallelCluster's cookbook starts
clustermgtd only then), boot, and the cluster is CREATE_COMPLETE when the head node's wait sees
them all. Their billing (from that launch to their termination at delete) goes to the clock's
ledger, for the run summary's node-minutes; a create meant to fail bills nothing there.

It answers getClusterStackEvents too: each cluster's stack keeps the events of its creation
(trainrun.local.stack_events), its own and its IAM resources' (`cluster_stack`).

The EC2 part is a `NodeLauncher`: `Ec2NodeLauncher` calls moto through boto3; tests of the
contract alone pass a stub and need no moto.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import yaml
from botocore.config import Config
from botocore.exceptions import ClientError
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from trainrun.adapters.clients import new_client
from trainrun.local import clock as aws_clock_ledger
from trainrun.local.loopback_server import LoopbackServer
from trainrun.local.stack_events import InvalidNextToken, ResourceEvent, StackEvents

PCLUSTER_VERSION = "3.16.1"
ACCOUNT_ID = "123456789012"  # moto's default account, as trainrun.local.template_deployer uses
# amzn2-ami-hvm-2.0.20180810-x86_64-gp2, one of the AMIs moto 5.2.5 loads by default.
DEFAULT_AMI_ID = "ami-04681a1dbd79675a5"
# A number of describes no create reaches: on the AWS clock, time alone completes it.
_NEVER = 2**31
CLUSTER_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]+$")
SCHEMA_VALIDATOR = "ConfigSchemaValidator"
# Tag keys ParallelCluster 3 puts on the instances it launches.
TAG_CLUSTER_NAME = "parallelcluster:cluster-name"
TAG_NODE_TYPE = "parallelcluster:node-type"
TAG_QUEUE_NAME = "parallelcluster:queue-name"
TAG_COMPUTE_RESOURCE = "parallelcluster:compute-resource-name"
TAG_VERSION = "parallelcluster:version"
HEAD_NODE = "HeadNode"
COMPUTE = "Compute"
# EC2 answers that mean the configuration names something that is not there: ParallelCluster's
# semantic validators reject those before creating anything, as a 400 with validation errors.
REJECTED_LAUNCH_CODES = ("InvalidSubnetID", "InvalidSubnet", "InvalidParameterValue", "InvalidGroup", "InvalidAMIID")
# EC2 answers that mean the compute resource's capacity reservation cannot hold its static nodes
# now (not started yet, expired, too small): the create is refused, naming the reservation.
RESERVATION_LAUNCH_CODES = ("ReservationCapacityExceeded", "InvalidCapacityReservationId")
# Stands in for the REST API's id in execute-api ARNs.
LOCAL_API_ID = "pclocalapi0"
# API Gateway's answer to a request without a SigV4 Authorization header.
MISSING_TOKEN = "Missing Authentication Token"  # noqa: S105 (a message, not a secret)
_SIGV4 = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<access_key>[^/,\s]+)/\d{8}/[a-z0-9-]+/(?P<service>[a-z0-9-]+)/aws4_request,\s*"
    r"SignedHeaders=[a-z0-9;-]+,\s*Signature=[0-9a-f]{64}$"
)


# --- launching nodes -------------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    instance_id: str
    instance_type: str
    state: str
    launch_time: datetime
    private_ip: str | None = None
    public_ip: str | None = None


class LaunchRejected(Exception):
    """The configuration names a subnet (or other resource) that EC2 does not know, or a capacity
    reservation that cannot take the nodes now (`validator` says which)."""

    def __init__(self, message: str, validator: str = "SubnetsValidator"):
        super().__init__(message)
        self.validator = validator


# A node's CustomActions/OnNodeConfigured: its scripts (URI, args), run in order (a Sequence, or one Script).
NodeScripts = list[tuple[str, list[str]]]


@dataclass(frozen=True)
class BootedCluster:
    """A cluster whose nodes are up: what a head node needs to know to play its part."""

    name: str
    region: str
    head_node_id: str
    # Slurm node names as ParallelCluster gives them: <queue>-st-<compute resource>-<n>.
    compute_node_names: list[str]
    tags: dict[str, str]
    # The head node's CustomActions/OnNodeConfigured, run once it is configured.
    on_node_configured: NodeScripts = field(default_factory=list)
    # The queue's CustomActions/OnNodeConfigured, run on each compute node once it is configured.
    compute_on_node_configured: NodeScripts = field(default_factory=list)
    # A file system in SharedStorage: ParallelCluster mounts it before the custom actions run.
    shared_file_system: bool = False
    # What clustermgtd records as the compute fleet's status, and describeCluster's
    # computeFleetStatus then says (PROTECTED: protected mode, see trainrun.local.slurm_head_node).
    set_compute_fleet_status: Callable[[str], None] = field(default=lambda status: None, compare=False)


class HeadNodeBootFailed(Exception):
    """Raised by a ClusterLifecycle: the cluster's creation ends CREATE_FAILED with this reason."""

    def __init__(self, reason: str, failure_code: str = "HeadNodeBootstrapFailure"):
        super().__init__(reason)
        self.failure_code = failure_code


class ClusterLifecycle(Protocol):
    """Told when a cluster's nodes boot (its creation is about to complete) and when they go."""

    def cluster_booted(self, cluster: BootedCluster) -> None: ...

    def cluster_gone(self, name: str, region: str) -> None: ...


class StackCreation(Protocol):
    """The IAM part of a stack's creation: its events, and describeCluster's failure if refused."""

    @property
    def events(self) -> list[ResourceEvent]: ...

    @property
    def failure(self) -> dict[str, str] | None: ...


class ClusterStack(Protocol):
    """What the cluster's CloudFormation stack creates, or is refused, before it launches the nodes
    (trainrun.local.iam.cluster_stack: its IAM resources, as the API's role)."""

    def create(self, cluster_name: str, region: str, config: Mapping[str, Any], stack_arn: str) -> StackCreation: ...


class NodeLauncher(Protocol):
    def launch(
        self,
        *,
        region: str,
        subnet_id: str,
        instance_type: str,
        count: int,
        tags: Mapping[str, str],
        capacity_reservation_target: Mapping[str, str] | None = None,
    ) -> list[str]: ...

    def describe(self, *, region: str, instance_ids: list[str]) -> list[Node]: ...

    def terminate(self, *, region: str, instance_ids: list[str]) -> None: ...


class Ec2NodeLauncher:
    """Nodes as EC2 instances, through boto3 clients pointed at `endpoint_url` (moto)."""

    def __init__(self, endpoint_url: str, *, ami_id: str = DEFAULT_AMI_ID, credential: str = "testing"):
        self._endpoint_url = endpoint_url
        self._ami_id = ami_id
        self._credential = credential
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _ec2(self, region: str) -> Any:
        with self._lock:
            if region not in self._clients:
                # From the process's shared service models (a session per client reads them again).
                self._clients[region] = new_client(
                    "ec2",
                    region_name=region,
                    endpoint_url=self._endpoint_url,
                    aws_access_key_id=self._credential,
                    aws_secret_access_key=self._credential,
                    config=Config(retries={"max_attempts": 2}),
                )
            return self._clients[region]

    def launch(
        self,
        *,
        region: str,
        subnet_id: str,
        instance_type: str,
        count: int,
        tags: Mapping[str, str],
        capacity_reservation_target: Mapping[str, str] | None = None,
    ) -> list[str]:
        if count == 0:
            return []
        # Nodes of a compute resource with a CapacityReservationTarget launch into it, as
        # ParallelCluster's launch template makes them.
        target = (
            {"CapacityReservationSpecification": {"CapacityReservationTarget": dict(capacity_reservation_target)}}
            if capacity_reservation_target
            else {}
        )
        try:
            reservation = self._ec2(region).run_instances(
                ImageId=self._ami_id,
                InstanceType=instance_type,
                MinCount=count,
                MaxCount=count,
                SubnetId=subnet_id,
                TagSpecifications=[
                    {"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                    for kind in ("instance", "volume")
                ],
                **target,
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code.startswith(REJECTED_LAUNCH_CODES):
                raise LaunchRejected(str(exc)) from exc
            if code.startswith(RESERVATION_LAUNCH_CODES):
                raise LaunchRejected(str(exc), "CapacityReservationValidator") from exc
            raise
        return [instance["InstanceId"] for instance in reservation["Instances"]]

    def describe(self, *, region: str, instance_ids: list[str]) -> list[Node]:
        if not instance_ids:
            return []
        pages = self._ec2(region).get_paginator("describe_instances").paginate(InstanceIds=instance_ids)
        return [
            Node(
                instance_id=item["InstanceId"],
                instance_type=item["InstanceType"],
                state=item["State"]["Name"],
                launch_time=item["LaunchTime"],
                private_ip=item.get("PrivateIpAddress"),
                public_ip=item.get("PublicIpAddress"),
            )
            for page in pages
            for reservation in page["Reservations"]
            for item in reservation["Instances"]
        ]

    def terminate(self, *, region: str, instance_ids: list[str]) -> None:
        if instance_ids:
            self._ec2(region).terminate_instances(InstanceIds=instance_ids)


# --- clusters ----------------------------------------------------------------------------------
@dataclass
class _Cluster:
    name: str
    region: str
    config_yaml: str
    tags: dict[str, str]
    head_node_id: str
    compute_node_ids: list[str]
    stack_arn: str
    created: datetime
    updated: datetime
    # The stack's events: of its creation, what getClusterStackEvents answers.
    events: StackEvents
    status: str = "CREATE_IN_PROGRESS"
    stack_status: str = "CREATE_IN_PROGRESS"
    # Set when the create is meant to fail; shown once the create ends.
    pending_failures: list[dict[str, str]] | None = None
    rollback: bool = True
    queue_name: str = ""
    compute_resource_name: str = ""
    failures: list[dict[str, str]] = field(default_factory=list)
    # As the head node's clustermgtd set it (PROTECTED), or updateComputeFleet; None: RUNNING once created.
    compute_fleet_status: str | None = None
    # Set when the delete is meant to fail: the nodes stay, and the cluster ends DELETE_FAILED.
    delete_fails: bool = False
    describes: int = 0
    since: float = field(default_factory=time.monotonic)
    # The head node's boot: claimed once (booted), running with the API's lock released (booting).
    booted: bool = False
    booting: bool = False
    # On the AWS clock (`timing`): when the local head node's boot ended (the API's clock).
    boot_ended: float | None = None
    # deleteClusterInstances (or a stopped fleet, or the deletion) has terminated the compute nodes.
    compute_terminated: bool = False

    @property
    def node_ids(self) -> list[str]:
        return [i for i in (self.head_node_id, *self.compute_node_ids) if i]


@dataclass(frozen=True)
class ClusterTiming:
    """A create on the AWS clock, in real (compressed) seconds: the stack's resources and the head
    node's boot; its custom action (the local head node's own start and custom action count
    towards these two, the longer wins); then clustermgtd's loop, after which it launches the
    static nodes (and after which a stopped fleet's nodes are terminated); their boot until
    CREATE_COMPLETE (boot and the head node's last poll); a delete, DeleteCluster to gone, and
    DeleteCluster to its compute nodes terminated by the stack's cleanup."""

    head_node_boot: float
    custom_action: float
    clustermgtd_loop: float
    fleet_boot: float
    deletion: float
    compute_terminated_in_deletion: float = 0.0


class _Invalid(Exception):
    """A 400 for createCluster: a message and the configuration's validation errors."""

    def __init__(self, message: str, errors: list[dict[str, str]] | None = None):
        super().__init__(message)
        self.message = message
        self.errors = errors or []


class LocalPclusterApi:
    """The ParallelCluster API on loopback, one thread; state in memory, per instance.

    A create completes once it has been described `describes_to_complete` times or
    `seconds_to_complete` have passed, whichever comes first; a delete likewise.
    """

    def __init__(
        self,
        moto_endpoint: str | None,
        region: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        launcher: NodeLauncher | None = None,
        describes_to_complete: int = 2,
        seconds_to_complete: float = 5.0,
        describes_to_delete: int = 2,
        seconds_to_delete: float = 5.0,
        api_user_role_arn: str | None,
        existing_cluster_status: int = 400,
        clock: Callable[[], float] = time.monotonic,
        timing: ClusterTiming | None = None,
    ):
        """`api_user_role_arn`: the only role whose sessions may invoke the API; None lets any
        signed request through (contract tests with no STS to assume a role in)."""
        if launcher is None:
            if moto_endpoint is None:
                raise ValueError("give the moto endpoint to launch nodes in, or a launcher")
            launcher = Ec2NodeLauncher(moto_endpoint)
        self.region = region
        self.api_user_role_arn = api_user_role_arn
        self._launcher = launcher
        self.describes_to_complete = describes_to_complete
        self.seconds_to_complete = seconds_to_complete
        self._describes_to_delete = describes_to_delete
        self._seconds_to_delete = seconds_to_delete
        self._existing_cluster_status = existing_cluster_status
        self._clock = clock
        self._timing = timing
        if timing is not None:
            # The local head node boots on the first look: its real boot counts towards the head
            # node's boot and custom action on the clock (`_fleet_up`), rather than after them.
            self.describes_to_complete, self.seconds_to_complete = 1, 0.0
            self._describes_to_delete, self._seconds_to_delete = _NEVER, timing.deletion
        # Who plays the nodes' software (the local head node); nobody by default.
        self.lifecycle: ClusterLifecycle | None = None
        # What refuses a cluster's stack (its IAM resources); nothing by default.
        self.cluster_stack: ClusterStack | None = None
        self._clusters: dict[tuple[str, str], _Cluster] = {}
        self._next_failures: list[dict[str, str]] | None = None
        # Names being created (their nodes launching, the lock released): a second create is refused.
        self._creating: set[tuple[str, str]] = set()
        self._next_delete_fails = False
        self._lock = threading.RLock()
        self._http = LoopbackServer(self.wsgi_app, what="ParallelCluster API", host=host, port=port)
        # Compute nodes' pending terminations on the AWS clock (clustermgtd's loop after a fleet
        # stop, the stack's cleanup in a deletion): cancelled when the API stops.
        self._pending_terminations: list[threading.Timer] = []
        self._routes = Map(
            [
                Rule("/v3/clusters", methods=["GET"], endpoint="list_clusters"),
                Rule("/v3/clusters", methods=["POST"], endpoint="create_cluster"),
                Rule("/v3/clusters/<name>", methods=["GET"], endpoint="describe_cluster"),
                Rule("/v3/clusters/<name>", methods=["DELETE"], endpoint="delete_cluster"),
                Rule("/v3/clusters/<name>/stackevents", methods=["GET"], endpoint="get_cluster_stack_events"),
                Rule("/v3/clusters/<name>/computefleet", methods=["PATCH"], endpoint="update_compute_fleet"),
                Rule("/v3/clusters/<name>/instances", methods=["DELETE"], endpoint="delete_cluster_instances"),
                # Stands in for the presigned S3 URL of describeCluster's clusterConfiguration.
                Rule("/_local/configurations/<region>/<name>", methods=["GET"], endpoint="configuration"),
            ],
            strict_slashes=False,
        )

    # --- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> LocalPclusterApi:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._http.start()

    def stop(self) -> None:
        for pending in self._pending_terminations:
            pending.cancel()
        self._http.stop()

    @property
    def url(self) -> str:
        return self._http.url

    # --- rehearsals ----------------------------------------------------------------------------
    def fail_next_create(self, failures: list[dict[str, str]] | None = None) -> None:
        """Make the next create end CREATE_FAILED, describing these failures."""
        with self._lock:
            self._next_failures = failures or [
                {
                    "failureCode": "HeadNodeBootstrapFailure",
                    "failureReason": "Cluster creation failed because of head node bootstrap failure.",
                }
            ]

    def fail_next_delete(self) -> None:
        """Make the next delete end DELETE_FAILED, leaving the cluster's nodes running."""
        with self._lock:
            self._next_delete_fails = True

    def cluster_names(self) -> list[str]:
        with self._lock:
            return sorted(name for _region, name in self._clusters)

    # --- HTTP --------------------------------------------------------------------------------------
    def wsgi_app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = Request(environ)
        try:
            endpoint, args = self._routes.bind_to_environ(environ).match()
        except NotFound:
            response = _error(404, "Not Found")
        except MethodNotAllowed:
            response = _error(405, f"Method {request.method} not allowed for {request.path}")
        except HTTPException as exc:
            response = _error(exc.code or 400, exc.description or "Bad Request")
        else:
            if endpoint == "configuration":
                response = self._configuration(args["region"], args["name"])
            elif (refusal := _refuse_unsigned(request) or self._refuse_principal(request)) is not None:
                response = refusal
            else:
                response = self._dispatch(endpoint, request, args)
        return response(environ, start_response)

    def _refuse_principal(self, request: Request) -> Response | None:
        """The API stack's resource policy: 403 unless signed by a live session of the API user role."""
        if self.api_user_role_arn is None:
            return None
        from moto.sts.models import sts_backends

        match = _SIGV4.match(request.headers.get("Authorization", ""))
        access_key = match["access_key"] if match else ""
        sts = sts_backends[ACCOUNT_ID]["aws"]
        session = sts.get_assumed_role_from_access_key(access_key)
        if session is not None:
            if session.session_token != request.headers.get("X-Amz-Security-Token"):
                return _error(403, "The security token included in the request is invalid.")
            if session.expiration <= datetime.now(UTC).replace(tzinfo=None):
                return _error(403, "The security token included in the request is expired")
            if session.role_arn == self.api_user_role_arn:
                return None
        _user_id, principal, _account = sts.get_caller_identity(access_key, self.region)
        resource = f"arn:aws:execute-api:{self.region}:{ACCOUNT_ID}:{LOCAL_API_ID}/prod/{request.method}{request.path}"
        return _error(
            403,
            f"User: {principal} is not authorized to perform: execute-api:Invoke on resource: {resource} "
            "with an explicit deny",
        )

    def _dispatch(self, endpoint: str, request: Request, args: Mapping[str, Any]) -> Response:
        region = request.args.get("region") or self.region
        try:
            if endpoint == "create_cluster":
                return self._create(request, request.args.get("region"))
            if "name" in args and not CLUSTER_NAME.match(args["name"]):
                return _error(400, f"Bad Request: '{args['name']}' does not match '{CLUSTER_NAME.pattern}'")
            if endpoint == "describe_cluster":
                return self._describe(args["name"], region, request.host_url)
            if endpoint == "delete_cluster":
                return self._delete(args["name"], region)
            if endpoint == "get_cluster_stack_events":
                return self._stack_events(args["name"], region, request.args.get("nextToken"))
            if endpoint == "update_compute_fleet":
                return self._update_compute_fleet(args["name"], region, request)
            if endpoint == "delete_cluster_instances":
                return self._delete_instances(args["name"], region, force=request.args.get("force") == "true")
            return self._list(region, request.args.getlist("clusterStatus"))
        except Exception as exc:  # an unexpected failure is the API's 500, as in ParallelCluster
            return _error(500, f"Failed when calling AWS service: {exc}")

    def _advanced(self, region: str, name: str) -> _Cluster | None:
        """The cluster, moved along as far as it goes now; None once deleted (or never created).

        `self._lock` guards the clusters' state only: EC2 calls and the head node's start and stop
        (seconds each) run with it released, so that clusters of concurrent runs move on their own.
        Each is claimed under the lock first (`booting`, DELETE_IN_PROGRESS), so it runs once.
        """
        with self._lock:
            cluster = self._clusters.get((region, name))
            if cluster is None:
                return None
            boot = self._claim_boot(cluster)
        if boot:
            failures = self._boot(cluster)
            with self._lock:
                cluster.boot_ended = self._clock()
                cluster.booting = False
                cluster.pending_failures = failures
        while True:
            with self._lock:
                if self._clusters.get((region, name)) is not cluster:
                    return None
                effects = self._advance(cluster)
                if not effects:
                    return cluster if (region, name) in self._clusters else None
            for effect in effects:
                effect()

    def _claim_boot(self, cluster: _Cluster) -> bool:
        """Under the lock: whether this caller boots the head node now (a create that is done)."""
        done = self._clock() - cluster.since >= self.seconds_to_complete
        due = cluster.status == "CREATE_IN_PROGRESS" and (cluster.describes >= self.describes_to_complete or done)
        if not due or cluster.booted:
            return False
        cluster.booted = True
        if cluster.pending_failures is not None:
            return False  # a create meant to fail ends without booting anything
        cluster.booting = True
        return True

    # --- operations --------------------------------------------------------------------------------
    def _create(self, request: Request, region_param: str | None) -> Response:
        if request.mimetype != "application/json":
            return _error(400, f"Bad Request: Invalid Content-type ({request.mimetype}), expected JSON data")
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return _error(400, "Bad Request: request body is required")
        name, config_yaml = body.get("clusterName"), body.get("clusterConfiguration")
        if not isinstance(name, str) or not isinstance(config_yaml, str):
            return _error(400, "Bad Request: 'clusterName' and 'clusterConfiguration' are required strings")
        if not CLUSTER_NAME.match(name):
            return _error(400, f"Bad Request: '{name}' does not match '{CLUSTER_NAME.pattern}'")
        if not config_yaml.strip():
            return _error(400, "configuration is required and cannot be empty")
        try:
            config = _parse_config(config_yaml)
            region = _region(region_param, config, self.region)
            essentials = _essentials(config)
            with self._lock:
                if (region, name) in self._clusters or (region, name) in self._creating:
                    return _error(self._existing_cluster_status, f"Cluster {name} already exists.")
                self._creating.add((region, name))
            stack_arn = f"arn:aws:cloudformation:{region}:{ACCOUNT_ID}:stack/{name}/{uuid.uuid4()}"
            try:
                # A refused stack launches nothing: its node roles come before its nodes.
                created = self.cluster_stack.create(name, region, config, stack_arn) if self.cluster_stack else None
                stack_failure = created.failure if created else None
                head_id, compute_ids = ("", []) if stack_failure else self._launch(name, region, essentials)
            finally:
                with self._lock:
                    self._creating.discard((region, name))
        except _Invalid as invalid:
            document: dict[str, Any] = {"message": invalid.message}
            if invalid.errors:
                document["configurationValidationErrors"] = invalid.errors
            return _json(400, document)

        now = datetime.now(UTC)
        cluster = _Cluster(
            name=name,
            region=region,
            config_yaml=config_yaml,
            tags=essentials.tags,
            head_node_id=head_id,
            compute_node_ids=compute_ids,
            stack_arn=stack_arn,
            created=now,
            updated=now,
            queue_name=essentials.queue_name,
            compute_resource_name=essentials.compute_resource_name,
            rollback=request.args.get("rollbackOnFailure", "true").lower() != "false",
            since=self._clock(),
            events=StackEvents(name, stack_arn),
        )
        cluster.events.stack("CREATE_IN_PROGRESS", "User Initiated")
        cluster.events.resources(created.events if created else [])
        with self._lock:
            failures = [stack_failure] if stack_failure else self._next_failures
            cluster.pending_failures, self._next_failures = failures, None
            self._clusters[(region, name)] = cluster
            return _json(202, {"cluster": _summary(cluster)})

    def _launch(self, name: str, region: str, essentials: _Essentials) -> tuple[str, list[str]]:
        common = {TAG_CLUSTER_NAME: name, TAG_VERSION: PCLUSTER_VERSION, **essentials.tags}
        launched: list[str] = []
        try:
            launched += self._launcher.launch(
                region=region,
                subnet_id=essentials.head_subnet_id,
                instance_type=essentials.head_instance_type,
                count=1,
                tags={**common, "Name": HEAD_NODE, TAG_NODE_TYPE: HEAD_NODE},
            )
            launched += self._launcher.launch(
                region=region,
                subnet_id=essentials.compute_subnet_id,
                instance_type=essentials.compute_instance_type,
                count=essentials.min_count,
                tags={
                    **common,
                    "Name": COMPUTE,
                    TAG_NODE_TYPE: COMPUTE,
                    TAG_QUEUE_NAME: essentials.queue_name,
                    TAG_COMPUTE_RESOURCE: essentials.compute_resource_name,
                },
                capacity_reservation_target=essentials.capacity_reservation_target,
            )
        except LaunchRejected as exc:
            self._launcher.terminate(region=region, instance_ids=launched)
            raise _Invalid("Invalid cluster configuration.", [_validation_error(str(exc), exc.validator)]) from exc
        return launched[0], launched[1:]

    def _describe(self, name: str, region: str, host_url: str) -> Response:
        with self._lock:
            cluster = self._clusters.get((region, name))
            if cluster is None:
                return _not_found(name, describe=True)
            cluster.describes += 1
        if self._advanced(region, name) is None:
            return _not_found(name, describe=True)
        head_ids = [cluster.head_node_id] if cluster.head_node_id else []  # none when the stack was refused
        nodes = {n.instance_id: n for n in self._launcher.describe(region=region, instance_ids=head_ids)}
        with self._lock:
            return self._described(cluster, nodes, host_url)

    def _described(self, cluster: _Cluster, nodes: dict[str, Node], host_url: str) -> Response:
        document: dict[str, Any] = {
            "clusterName": cluster.name,
            "region": cluster.region,
            "version": PCLUSTER_VERSION,
            # Spelled so in DescribeClusterResponseContent (ClusterInfoSummary has `cloudformation...`).
            "cloudFormationStackStatus": cluster.stack_status,
            "clusterStatus": cluster.status,
            "scheduler": {"type": "slurm"},
            "cloudformationStackArn": cluster.stack_arn,
            "creationTime": _timestamp(cluster.created),
            "lastUpdatedTime": _timestamp(cluster.updated),
            "clusterConfiguration": {"url": f"{host_url}_local/configurations/{cluster.region}/{cluster.name}"},
            "computeFleetStatus": _fleet_status(cluster),
            "tags": [{"key": k, "value": v} for k, v in {**cluster.tags, TAG_VERSION: PCLUSTER_VERSION}.items()],
        }
        head = nodes.get(cluster.head_node_id)
        if head is not None and head.state != "terminated":
            document["headNode"] = _instance(head)
        if cluster.failures:
            document["failures"] = cluster.failures
        return _json(200, document)

    def _delete(self, name: str, region: str) -> Response:
        cluster = self._advanced(region, name)
        if cluster is None:
            return _not_found(name, describe=False)
        with self._lock:
            deleting = cluster.status != "DELETE_IN_PROGRESS"
            if deleting:
                cluster.delete_fails, self._next_delete_fails = self._next_delete_fails, False
                self._set(cluster, "DELETE_IN_PROGRESS", "DELETE_IN_PROGRESS")
            response = _json(202, {"cluster": _summary(cluster)})
        if deleting and not cluster.delete_fails:
            self._launcher.terminate(region=region, instance_ids=[cluster.head_node_id])
            cleanup = self._timing.compute_terminated_in_deletion if self._timing is not None else 0.0
            self._terminate_compute_nodes(cluster, after=cleanup)
            self._gone(cluster)
        return response

    def _delete_instances(self, name: str, region: str, *, force: bool) -> Response:
        """deleteClusterInstances, as pcluster's cluster_instances_controller and
        Cluster.terminate_nodes do it (aws-parallelcluster 3.16.1): the API's role terminates every
        compute instance of the cluster (its pending, running, stopping or stopped ones) before the
        202, whatever the stack's or the fleet's status; 404 for an unknown cluster unless `force`.
        Not emulated: with the fleet still RUNNING, clustermgtd would launch replacements (trainrun
        stops the fleet first)."""
        cluster = self._advanced(region, name)
        if cluster is None:
            return _accepted() if force else _not_found(name, describe=False)
        self._terminate_compute_nodes(cluster, after=0.0)
        return _accepted()

    def _update_compute_fleet(self, name: str, region: str, request: Request) -> Response:
        """updateComputeFleet, as pcluster's cluster_compute_fleet_controller and Cluster.stop do it
        (aws-parallelcluster 3.16.1): only START_REQUESTED or STOP_REQUESTED, only while the stack is
        CREATE_COMPLETE, UPDATE_COMPLETE or UPDATE_ROLLBACK_COMPLETE; a fleet already stopping or
        stopped is left so. A stop's work is clustermgtd's on AWS: the compute nodes' instances are
        terminated on its next loop (at once here, or one loop later on the AWS clock), their billing
        ends then, and the fleet is STOPPED. A stopped fleet is not started again here:
        START_REQUESTED is refused, saying so. The answer is a 204, without the body the spec gives
        it (HTTP lets a 204 carry none)."""
        body = request.get_json(silent=True) if request.mimetype == "application/json" else None
        status = body.get("status") if isinstance(body, dict) else None
        if status not in ("START_REQUESTED", "STOP_REQUESTED"):
            return _error(
                400,
                "the update compute fleet status can only be set to `START_REQUESTED` or `STOP_REQUESTED` "
                "for Slurm scheduler clusters.",
            )
        cluster = self._advanced(region, name)
        if cluster is None:
            return _not_found(name, describe=True)
        with self._lock:
            if cluster.stack_status not in ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE"):
                return _error(
                    400, f"Cannot stop/disable compute fleet while stack is in {cluster.stack_status} status."
                )
            if status == "START_REQUESTED":
                return _error(400, "the local ParallelCluster API does not start a compute fleet again")
            stopping = cluster.compute_fleet_status not in ("STOP_REQUESTED", "STOPPING", "STOPPED")
            if stopping:
                cluster.compute_fleet_status = "STOP_REQUESTED"
        if stopping:
            loop = self._timing.clustermgtd_loop if self._timing is not None else 0.0  # the AWS clock's
            self._terminate_compute_nodes(cluster, after=loop, fleet_status="STOPPED")
        return Response(status=204)

    def _terminate_compute_nodes(self, cluster: _Cluster, *, after: float, fleet_status: str | None = None) -> None:
        """The compute nodes terminated and their billing ended, now or `after` real seconds (a
        Timer, on the AWS clock), once: by whichever of clustermgtd (a stopped fleet, then
        `fleet_status`), deleteClusterInstances or the stack's cleanup comes first."""
        if after > 0:
            pending = threading.Timer(
                after,
                self._terminate_compute_nodes,
                args=(cluster,),
                kwargs={"after": 0.0, "fleet_status": fleet_status},
            )
            pending.daemon = True
            self._pending_terminations.append(pending)
            pending.start()
            return
        with self._lock:
            terminate, cluster.compute_terminated = not cluster.compute_terminated, True
        if terminate:
            self._launcher.terminate(region=cluster.region, instance_ids=cluster.compute_node_ids)
            aws_clock_ledger.ledger().nodes_ended(cluster.name, cluster.compute_node_ids, time.time())
        if fleet_status is not None:
            with self._lock:
                cluster.compute_fleet_status = fleet_status

    def _stack_events(self, name: str, region: str, next_token: str | None) -> Response:
        cluster = self._advanced(region, name)
        if cluster is None:
            return _not_found(name, describe=True)
        try:
            return _json(200, cluster.events.page(next_token))
        except InvalidNextToken:
            # CloudFormation's ValidationError, which ParallelCluster answers as a 400.
            return _error(400, f"Unexpected error when retrieving stack events: Invalid NextToken: {next_token}")

    def _list(self, region: str, statuses: list[str]) -> Response:
        with self._lock:
            names = [name for (cluster_region, name) in sorted(self._clusters) if cluster_region == region]
        clusters = [cluster for name in names if (cluster := self._advanced(region, name)) is not None]
        with self._lock:
            summaries = [_summary(c) for c in clusters if not statuses or c.status in statuses]
        return _json(200, {"clusters": summaries})

    def _configuration(self, region: str, name: str) -> Response:
        with self._lock:
            cluster = self._clusters.get((region, name))
        if cluster is None:
            return _error(404, "NoSuchKey")
        return Response(cluster.config_yaml, status=200, mimetype="application/yaml")

    # --- the simulated stack -----------------------------------------------------------------------
    def _advance(self, cluster: _Cluster) -> list[Callable[[], None]]:
        """Under the lock: move a cluster along once it has been described or waited on enough.

        Returns the work that goes with the move, for the caller to do with the lock released.
        A create waits for its head node's boot (claimed by `_claim_boot`) before it ends.
        """
        elapsed = self._clock() - cluster.since
        booted = cluster.booted and not cluster.booting
        if cluster.status == "CREATE_IN_PROGRESS" and booted and self._fleet_up(cluster):
            if cluster.pending_failures is None:
                self._set(cluster, "CREATE_COMPLETE", "CREATE_COMPLETE")
                cluster.events.stack("CREATE_COMPLETE")
                return []
            cluster.failures = cluster.pending_failures
            cluster.events.create_failed(cluster.failures[0]["failureReason"], rollback=cluster.rollback)
            self._set(cluster, "CREATE_FAILED", "ROLLBACK_COMPLETE" if cluster.rollback else "CREATE_FAILED")
            if cluster.rollback:
                # A rollback deletes what the stack created; the cluster stays CREATE_FAILED.
                return [
                    lambda: self._launcher.terminate(region=cluster.region, instance_ids=cluster.node_ids),
                    lambda: self._gone(cluster),
                ]
        elif cluster.status == "DELETE_IN_PROGRESS" and (
            cluster.describes >= self._describes_to_delete or elapsed >= self._seconds_to_delete
        ):
            if cluster.delete_fails:
                self._set(cluster, "DELETE_FAILED", "DELETE_FAILED")
                return []
            del self._clusters[(cluster.region, cluster.name)]
        return []

    def _fleet_up(self, cluster: _Cluster) -> bool:
        """Under the lock: whether the static nodes are up (always, off the AWS clock); on it,
        the compute nodes' billing begins (in the clock's ledger) when clustermgtd launched them."""
        if self._timing is None or cluster.boot_ended is None:
            return True
        timing = self._timing
        configured = max(cluster.boot_ended, cluster.since + timing.head_node_boot + timing.custom_action)
        launched = configured + timing.clustermgtd_loop
        now = self._clock()
        if now < launched + timing.fleet_boot:
            return False
        if cluster.pending_failures is None:
            launched_at = time.time() - (now - launched)
            for node, instance_id in zip(_compute_node_names(cluster), cluster.compute_node_ids, strict=True):
                aws_clock_ledger.ledger().node_started(cluster.name, instance_id, node, launched_at)
        return True

    def _boot(self, cluster: _Cluster) -> list[dict[str, str]] | None:
        """Boot the head node's software; the failures to end the creation with, if it cannot."""
        if self.lifecycle is None:
            return None
        config = _parse_config(cluster.config_yaml)
        booted = BootedCluster(
            name=cluster.name,
            region=cluster.region,
            head_node_id=cluster.head_node_id,
            compute_node_names=_compute_node_names(cluster),
            tags=dict(cluster.tags),
            on_node_configured=_on_node_configured(config),
            compute_on_node_configured=_compute_on_node_configured(config),
            shared_file_system=_has_shared_file_system(config),
            set_compute_fleet_status=lambda status: self._set_fleet_status(cluster, status),
        )
        try:
            self.lifecycle.cluster_booted(booted)
        except HeadNodeBootFailed as exc:
            return [{"failureCode": exc.failure_code, "failureReason": str(exc)}]
        return None

    def _set_fleet_status(self, cluster: _Cluster, status: str) -> None:
        with self._lock:
            cluster.compute_fleet_status = status

    def _gone(self, cluster: _Cluster) -> None:
        if self.lifecycle is not None:
            self.lifecycle.cluster_gone(cluster.name, cluster.region)

    def _set(self, cluster: _Cluster, status: str, stack_status: str) -> None:
        cluster.status, cluster.stack_status = status, stack_status
        cluster.updated = datetime.now(UTC)
        cluster.describes = 0
        cluster.since = self._clock()


def _accepted() -> Response:
    """A 202 without a body, as the spec declares deleteClusterInstances' (no Content-Type either)."""
    response = Response(status=202)
    del response.headers["Content-Type"]
    return response


def _compute_node_names(cluster: _Cluster) -> list[str]:
    """The Slurm names of the cluster's static nodes, as ParallelCluster names them (<queue>-st-<resource>-<n>)."""
    return [
        f"{cluster.queue_name}-st-{cluster.compute_resource_name}-{n}"
        for n in range(1, len(cluster.compute_node_ids) + 1)
    ]


# --- the configuration's essentials --------------------------------------------------------------
@dataclass(frozen=True)
class _Essentials:
    head_subnet_id: str
    head_instance_type: str
    queue_name: str
    compute_subnet_id: str
    compute_resource_name: str
    compute_instance_type: str
    min_count: int
    tags: dict[str, str]
    capacity_reservation_target: dict[str, str] | None = None


def _parse_config(config_yaml: str) -> dict[str, Any]:
    try:
        config = yaml.safe_load(config_yaml)
    except yaml.YAMLError as exc:
        raise _Invalid(f"Invalid cluster configuration: {exc}") from exc
    if not isinstance(config, dict):
        raise _Invalid("Invalid cluster configuration: the configuration is not a YAML mapping")
    return config


def _on_node_configured(config: dict[str, Any]) -> NodeScripts:
    head_node = config.get("HeadNode", {})
    return _node_scripts(head_node.get("CustomActions", {}).get("OnNodeConfigured"))


def _compute_on_node_configured(config: dict[str, Any]) -> NodeScripts:
    queues = config.get("Scheduling", {}).get("SlurmQueues") or [{}]
    action = queues[0].get("CustomActions", {}).get("OnNodeConfigured") if isinstance(queues[0], dict) else None
    return _node_scripts(action)


def _node_scripts(action: Any) -> NodeScripts:
    """A custom action's scripts in order: its Script, or each of its Sequence (ParallelCluster's
    CustomActionScriptSchema takes one or the other)."""
    if not isinstance(action, dict):
        return []
    sequence = action.get("Sequence")
    steps = sequence if isinstance(sequence, list) else [action]
    return [
        (step["Script"], [str(arg) for arg in step.get("Args") or []])
        for step in steps
        if isinstance(step, dict) and isinstance(step.get("Script"), str)
    ]


def _has_shared_file_system(config: dict[str, Any]) -> bool:
    storage = config.get("SharedStorage") or []
    return any(isinstance(item, dict) and item.get("StorageType") == "FsxLustre" for item in storage)


def _fleet_status(cluster: _Cluster) -> str:
    """ComputeFleetStatus: what clustermgtd set (PROTECTED), else RUNNING once the cluster is created."""
    if cluster.compute_fleet_status is not None:
        return cluster.compute_fleet_status
    return "RUNNING" if cluster.status == "CREATE_COMPLETE" else "UNKNOWN"


def _region(param: str | None, config: dict[str, Any], default: str) -> str:
    configured = config.get("Region")
    if param and configured and param != configured:
        raise _Invalid("region is set in both parameter and configuration and conflicts.")
    return str(param or configured or default)


def _essentials(config: dict[str, Any]) -> _Essentials:
    """What this emulator needs from a config, each problem a ConfigSchemaValidator error.

    ParallelCluster checks far more (tests/pcluster loads every rendered config through its
    schema); these are the keys the launch depends on.
    """
    problems: list[str] = []
    name = instance_type = None
    min_count = 0
    target: dict[str, Any] = {}

    def get(path: str, kind: type | tuple[type, ...], node: Any = config) -> Any:
        for key in path.split("/"):
            node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            problems.append(f"{path}: Missing data for required field.")
        elif not isinstance(node, kind) or isinstance(node, bool):
            problems.append(f"{path}: Invalid value {node!r}.")
            return None
        return node

    head_subnet = get("HeadNode/Networking/SubnetId", str)
    head_type = get("HeadNode/InstanceType", str)
    if get("Scheduling/Scheduler", str) not in (None, "slurm"):
        problems.append("Scheduling/Scheduler: the local ParallelCluster API runs slurm clusters only.")
    queues = get("Scheduling/SlurmQueues", list) or []
    queue = queues[0] if len(queues) == 1 and isinstance(queues[0], dict) else {}
    if len(queues) != 1:
        problems.append("Scheduling/SlurmQueues: the local ParallelCluster API takes exactly one queue.")
    resources = get("ComputeResources", list, queue) if queue else []
    resource = resources[0] if resources and len(resources) == 1 and isinstance(resources[0], dict) else {}
    if queue and len(resources or []) != 1:
        problems.append("Scheduling/SlurmQueues/ComputeResources: the local API takes exactly one compute resource.")
    queue_name = get("Name", str, queue) if queue else None
    subnets = get("Networking/SubnetIds", list, queue) if queue else None
    if queue and not (subnets and isinstance(subnets[0], str)):
        problems.append("Scheduling/SlurmQueues/Networking/SubnetIds: one subnet id is required.")
    if resource:
        name, instance_type = get("Name", str, resource), get("InstanceType", str, resource)
        min_count = get("MinCount", int, resource) or 0
        if isinstance(min_count, int) and min_count < 0:
            problems.append("Scheduling/SlurmQueues/ComputeResources/MinCount: Must be greater than or equal to 0.")
        target = get("CapacityReservationTarget", dict, resource) or {}
        if resource.get("CapacityReservationTarget") is not None and not (
            target.get("CapacityReservationId") or target.get("CapacityReservationResourceGroupArn")
        ):
            problems.append(
                "CapacityReservationTarget: one of CapacityReservationId or CapacityReservationResourceGroupArn."
            )
    tags = _config_tags(config.get("Tags"), problems)
    if problems:
        raise _Invalid("Invalid cluster configuration.", [_validation_error(p) for p in problems])
    return _Essentials(
        head_subnet_id=str(head_subnet),
        head_instance_type=str(head_type),
        queue_name=queue_name or "",
        compute_subnet_id=(subnets or [""])[0],
        compute_resource_name=str(name),
        compute_instance_type=str(instance_type),
        min_count=min_count,
        tags=tags,
        capacity_reservation_target={k: str(v) for k, v in target.items() if v} or None,
    )


def _config_tags(tags: Any, problems: list[str]) -> dict[str, str]:
    if tags is None:
        return {}
    if not isinstance(tags, list) or not all(isinstance(t, dict) and isinstance(t.get("Key"), str) for t in tags):
        problems.append("Tags: a list of {Key, Value}.")
        return {}
    return {t["Key"]: str(t.get("Value", "")) for t in tags}


def _validation_error(message: str, validator: str = SCHEMA_VALIDATOR) -> dict[str, str]:
    # ConfigValidationMessage as ParallelCluster fills it: level, type, message (no id).
    return {"level": "ERROR", "type": validator, "message": message}


# --- answers -----------------------------------------------------------------------------------------
def _summary(cluster: _Cluster) -> dict[str, Any]:
    """ClusterInfoSummary."""
    return {
        "clusterName": cluster.name,
        "region": cluster.region,
        "version": PCLUSTER_VERSION,
        "cloudformationStackArn": cluster.stack_arn,
        "cloudformationStackStatus": cluster.stack_status,
        "clusterStatus": cluster.status,
        "scheduler": {"type": "slurm"},
    }


def _instance(node: Node) -> dict[str, Any]:
    """EC2Instance."""
    document = {
        "instanceId": node.instance_id,
        "instanceType": node.instance_type,
        "launchTime": _timestamp(node.launch_time),
        "privateIpAddress": node.private_ip or "",
        "state": node.state,
    }
    if node.public_ip:
        document["publicIpAddress"] = node.public_ip
    return document


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _refuse_unsigned(request: Request) -> Response | None:
    """API Gateway's IAM auth, less the signature check: a 403 unless the request is SigV4-signed."""
    authorization = request.headers.get("Authorization")
    if not authorization or not request.headers.get("X-Amz-Date"):
        return _error(403, MISSING_TOKEN)
    match = _SIGV4.match(authorization)
    if match is None:
        return _error(
            403, f"Authorization header requires 'Credential', 'SignedHeaders' and 'Signature': {authorization}"
        )
    if match["service"] != "execute-api":
        return _error(403, "Credential should be scoped to correct service: 'execute-api'.")
    return None


def _not_found(name: str, *, describe: bool) -> Response:
    message = f"Cluster '{name}' does not exist or belongs to an incompatible ParallelCluster major version."
    if not describe:
        message += (
            " In case you have running instances belonging to a deleted cluster please use the "
            "DeleteClusterInstances API."
        )
    return _error(404, message)


def _error(status: int, message: str) -> Response:
    return _json(status, {"message": message})


def _json(status: int, document: dict[str, Any]) -> Response:
    return Response(json.dumps(document), status=status, mimetype="application/json")
