"""What a run creates, and how far along deleting it is.

The ids here are recorded in the run record as each step creates them; teardown also finds
every resource by its `trainrun:run-id` tag, so a resource whose id was never recorded (the
step crashed between creating and recording) is deleted all the same.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field


class NetworkIds(BaseModel):
    """The network of a run. `created` is False when the run named an existing VPC and subnets."""

    model_config = ConfigDict(extra="forbid")

    created: bool = True
    vpc_id: str | None = None
    public_subnet_id: str | None = None
    private_subnet_id: str | None = None
    # An EKS run's second subnet, in another zone than the reservation's (the control plane's).
    control_plane_subnet_id: str | None = None
    internet_gateway_id: str | None = None
    eip_allocation_id: str | None = None
    nat_gateway_id: str | None = None
    public_route_table_id: str | None = None
    private_route_table_id: str | None = None
    security_group_id: str | None = None
    s3_endpoint_id: str | None = None


class StorageIds(BaseModel):
    """The file system of a run. `created` is False when the run named an existing file system."""

    model_config = ConfigDict(extra="forbid")

    created: bool = True
    file_system_id: str | None = None
    # What a node mounts (<dns_name>@tcp:/<mount_name>): CreateFileSystem answers with both at once.
    dns_name: str | None = None
    mount_name: str | None = None
    data_repository_association_id: str | None = None


class ClusterRef(BaseModel):
    """The ParallelCluster cluster of a run, as far as the run record needs to know it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    region: str
    status: str | None = None
    head_node_instance_id: str | None = None


class EksClusterRef(BaseModel):
    """The Amazon EKS cluster of a `cluster.kind: eks` run and what hangs on it, as each step records it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    region: str
    status: str | None = None
    # The node group's launch template, by name (EC2's are per account and region) and id once created.
    launch_template_name: str | None = None
    launch_template_id: str | None = None
    nodegroup: str | None = None
    nodegroup_status: str | None = None
    # When a pass first found the node group ACTIVE (its add-ons' pods start on its nodes then).
    nodes_active_at: datetime | None = None
    # Each add-on's status, by name.
    addons: dict[str, str] = Field(default_factory=dict)
    # The Kubernetes side (trainrun.steps.kubernetes): when every object of the run passed the API
    # server's dry run, when the bootstrap objects were applied, when the nodes were first ready
    # for the jobs (devices advertised), and when the stage Job completed.
    dry_run_at: datetime | None = None
    bootstrapped_at: datetime | None = None
    nodes_ready_at: datetime | None = None
    staged_at: datetime | None = None


class Progress(BaseModel):
    """One pass of a wait loop or of teardown: done, or what it is still waiting for."""

    model_config = ConfigDict(frozen=True)

    done: bool
    waiting_on: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    # The part of `waiting_on` that AWS refused to delete because something else still uses it
    # (DependencyViolation): it waits on another resource's deletion, not on its own.
    blocked: list[str] = Field(default_factory=list)
    # How long the workflow's wait state waits before the next pass (set by the step from the
    # stack's PollIntervalSeconds, so a local run can poll fast).
    retry_after_seconds: int = 0


class ReservationWindow(BaseModel):
    """When the run's reservation lets it run (trainrun.logic.capacity.reservation_window):
    provisioning waits until `provision_at` (None: it did not wait), and the job is told to stop
    at `stop_job_at` (None: the reservation does not take the instances away)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    reservation_id: str
    starts_at: AwareDatetime | None = None
    ends_at: AwareDatetime | None = None
    provision_at: AwareDatetime | None = None
    stop_job_at: AwareDatetime | None = None

    def stop_is_due(self, now: datetime) -> bool:
        return self.stop_job_at is not None and now >= self.stop_job_at

    def ended_cause(self, job: str, stopped: str | None = None) -> str:
        """Why the run ended ReservationEnded (`stopped`: how its job was stopped; None: the job
        was due to start too late to run at all), and what to do next."""
        ends = self.ends_at.isoformat() if self.ends_at else "soon"
        what = stopped or f"too little of it is left to start the {job} job"
        return (
            f"capacity block {self.reservation_id} ends {ends} and EC2 begins terminating its instances before "
            f"then: {what}; the run was torn down, its checkpoints exported first. To go on, submit the run again "
            "with capacity.reservation_id set to the next capacity block and workload.resume_from set to where "
            "the checkpoints went (the run's checkpoints destination)"
        )
