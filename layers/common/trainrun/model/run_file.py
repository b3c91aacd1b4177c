"""The run file: one YAML document that describes a whole training run.

Everything here is untrusted input. Every string field except the shell fields
(`workload.setup`, `workload.compile`, `workload.train`) is checked against a strict
pattern, and reaches a command line only through `trainrun.logic.shell_quoting`, which quotes it.
Unknown keys are errors.
Sizes and enums follow what AWS accepts, so a bad value fails here, before anything billable
exists, rather than half-way through provisioning.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal, NamedTuple, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from trainrun.errors import WHOLE_FILE, Problem, RunSpecInvalid
from trainrun.logic.eks_versions import DEFAULT_KUBERNETES_VERSION, SUPPORTED_KUBERNETES_VERSIONS
from trainrun.logic.job_log import compile_progress_pattern
from trainrun.logic.neuron_install import supported_os, unsupported_os_reason
from trainrun.model.findings import Code, Finding, Severity
from trainrun.model.record_size import MAX_SPEC_BYTES, encode_json
from trainrun.model.spelling import closest

# --- patterns -------------------------------------------------------------------------------
# pydantic matches these with Rust's regex engine, where `$` is the end of the text (Python's
# `re` would also accept a trailing newline there).
RUN_NAME = r"^[a-z][a-z0-9-]{0,39}$"
# A run by its run file's name or by its run id (what `trainrun submit` prints; RUN_ID_PATTERN).
RUN_NAME_OR_ID = r"^[a-z][a-z0-9-]{0,79}$"
REGION = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]$"
AVAILABILITY_ZONE = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9][a-z]$"
RESERVATION_ID = r"^cr-[0-9a-f]{17}$"
# The same regions as REGION, in any partition (aws, aws-cn, aws-us-gov, aws-iso, aws-iso-b, ...).
RESERVATION_GROUP_ARN = (
    r"^arn:aws(-cn|-us-gov|-iso(-[a-z])?)?:resource-groups:[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]:[0-9]{12}:"
    r"group/[A-Za-z0-9_.-]{1,128}$"
)
EC2_INSTANCE_TYPE = r"^[a-z][a-z0-9-]*\.[a-z0-9]+$"
VPC_ID = r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$"
SUBNET_ID = r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$"
FILE_SYSTEM_ID = r"^fs-[0-9a-f]{17}$"
# An AMI id as EC2 issues them (8 or 17 hex digits); ParallelCluster's Image/CustomAmi pattern
# (pcluster.constants.PCLUSTER_AMI_ID_REGEX) accepts both lengths.
AMI_ID = r"^ami-([0-9a-f]{8}|[0-9a-f]{17})$"
# S3 bucket naming rules (lower case, 3-63, no leading/trailing dot or dash) and a key made
# of the "safe" characters of the S3 guide, less the ones a shell gives a meaning to
# (! * ' ( )): values are quoted anyway, the pattern is the second line of defence.
S3_URI = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9_.=+/-]*)?$"
# A host never starts with '-' (ssh would read `git@-oProxyCommand=...` as an option).
GIT_URL = (
    r"^(https://[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?/[A-Za-z0-9._~/-]+"
    r"|git@[A-Za-z0-9][A-Za-z0-9.-]*:[A-Za-z0-9._~/-]+)$"
)
# A ref never starts with '-' (it would be read as a git option); git's own ref-format rules
# (`git_ref_format_problem`) then refuse what `git check-ref-format` refuses.
GIT_REF = r"^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,127}$"
# A relative path inside the workload: no leading '/', no '..' segment (checked below).
RELATIVE_PATH = r"^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,255}$"
# A relative path on the submitter's machine: printable, not starting with '/' or '~' (a run file
# that names someone's home or an absolute path does not work on a colleague's machine).
LOCAL_PATH = r"^[^/~\x00-\x1f\x7f][^\x00-\x1f\x7f]{0,1023}$"
FSX_PATH = r"^/fsx(/[A-Za-z0-9_.-]+)*/?$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
# Printable ASCII without newline; env values are shell-quoted, but a newline would still
# break the one-variable-per-line files they are written to.
ENV_VALUE = r"^[\x20-\x7e]{0,4096}$"
# Names bash sets itself, keeps read-only or gives a meaning to (IFS, BASH_ENV): exporting them
# fails or changes how every script of the run is read, and never means what it says.
SHELL_RESERVED_ENV_NAMES = frozenset(
    "_ BASHOPTS BASHPID BASH_ALIASES BASH_ARGC BASH_ARGV BASH_ARGV0 BASH_CMDS BASH_COMMAND BASH_ENV "  # noqa: SIM905
    "BASH_LINENO BASH_SOURCE BASH_SUBSHELL BASH_VERSINFO BASH_VERSION DIRSTACK EPOCHREALTIME EPOCHSECONDS "
    "EUID FUNCNAME GROUPS HISTCMD IFS LINENO OPTIND PIPESTATUS PPID RANDOM SECONDS SHELLOPTS SRANDOM UID".split()
)
# Names a run cannot set: the job's wrapper, Slurm or the login shell own them, and an `export`
# of them breaks the job (or trainrun's view of it) rather than configuring the workload.
# Name -> why, as the error says it.
RESERVED_ENV_NAMES = {
    "PATH": "the job needs it to find srun, bash and the Neuron tools; prepend in the command instead "
    "(export PATH=/my/bin:$PATH in workload.train)",
    "LD_PRELOAD": "it would be loaded into srun, bash and every tool the job's wrapper runs; "
    "set it in the command for the program that needs it",
    "HOME": "it is the cluster user's home; the login shell, pip and the AWS CLI read their configuration there",
    "USER": "it is the cluster user's name, set by the login shell",
    "LOGNAME": "it is the cluster user's name, set by the login shell",
    "SHELL": "it is the cluster user's login shell",
    "PWD": "the shell sets it on every cd",
    "OLDPWD": "the shell sets it on every cd",
    # trainrun sets it to the run's compile cache, in both jobs (trainrun.logic.compile_cache); the
    # nodes may read and write only that location, so a URL set here would fail on permissions.
    "NEURON_COMPILE_CACHE_URL": "trainrun sets it to the run's compile cache, the same for the compile "
    "and train jobs; choose the location with workload.compile_cache (s3://bucket/prefix/, or off)",
}
# Prefixes a run cannot set: Slurm reads SLURM_* and SRUN_* as srun options and sets SLURM_JOB_ID,
# which the job's wrapper reports; TRAINRUN_* names belong to trainrun's wrapper, except
# TRAINRUN_LOCAL_*, the settings the local stand-in workload (examples/local-workload) reads.
RESERVED_ENV_PREFIXES = {
    "SLURM_": "Slurm reads SLURM_* as srun options and sets the job's own (SLURM_JOB_ID is what the "
    "job's end is matched with)",
    "SRUN_": "srun reads SRUN_* as its options; trainrun decides how the job is launched",
    "TRAINRUN_": "TRAINRUN_* names belong to trainrun's job wrapper",
}
STAND_IN_WORKLOAD_ENV_PREFIX = "TRAINRUN_LOCAL_"
# Names a run may set, but that usually break a Neuron job when set for the whole run: a WARNING
# finding (Code.ENVIRONMENT_VARIABLE_RISKY). Per the Neuron Runtime's environment variable
# reference, NEURON_RT_VISIBLE_CORES/NEURON_RT_NUM_CORES partition an instance between processes
# (one value for every rank makes them fight for the same cores) and NEURON_RT_ROOT_COMM_ID names
# the rank-0 node of one job; the libfabric (FI_*) settings the Neuron multi-node guides use are
# FI_PROVIDER=efa and FI_EFA_*, checked separately.
RISKY_ENV_NAMES = {
    "LD_LIBRARY_PATH": "it replaces the library path the Neuron runtime and EFA (libfabric) are found on; "
    "prepend in the command instead (export LD_LIBRARY_PATH=/my/lib:$LD_LIBRARY_PATH)",
    "PYTHONPATH": "it replaces the module path of the workload's Python environment; "
    "prepend in the command instead (export PYTHONPATH=/my/lib:$PYTHONPATH)",
    "NEURON_RT_VISIBLE_CORES": "every process of the job would claim the same NeuronCores; "
    "let the launcher (torchrun, neuron_parallel_compile) give each process its cores",
    "NEURON_RT_NUM_CORES": "every process of the job would ask for the same number of NeuronCores; "
    "let the launcher give each process its cores",
    "NEURON_RT_ROOT_COMM_ID": "it names the rank-0 node of one job; set it in the command from "
    "the job's first node (scontrol show hostnames $SLURM_JOB_NODELIST)",
}
DURATION = r"^([1-9][0-9]*)(s|m|h|d)$"
# A topic of any partition and region; a FIFO topic's name ends in .fifo.
SNS_TOPIC_ARN = r"^arn:aws[-a-z]*:sns:[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]:[0-9]{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?$"
# A container image by its registry's host, its repository and a tag or digest: a reference of the
# OCI distribution spec, less the forms that leave the registry or the version implicit (`ubuntu` is
# Docker Hub's `latest`, which can change under a run between its compile and its train job).
CONTAINER_IMAGE = (
    r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+(:[0-9]{1,5})?"
    r"(/[a-z0-9]+([._-]+[a-z0-9]+)*)+"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$"
)

# --- facts about AWS ------------------------------------------------------------------------
TRAINIUM_INSTANCE_TYPES = ("trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge")
# ParallelCluster 3.16 `Image/Os` values (pcluster.constants.SUPPORTED_OSES).
PCLUSTER_OSES = ("alinux2023", "ubuntu2204", "ubuntu2404", "rhel8", "rocky8", "rhel9", "rocky9")
# OSes ParallelCluster publishes no AMI for (pcluster.constants.PRIVATE_OSES): its
# OsCustomAmiValidator refuses a cluster of these without Image/CustomAmi.
PCLUSTER_OSES_WITHOUT_OFFICIAL_AMI = ("rocky8", "rocky9")
RETIRED_OSES = {
    "alinux2": "alinux2023",
    "ubuntu2004": "ubuntu2204",
    "centos7": "rocky8",
}
FSX_DEPLOYMENT_TYPES = ("SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2")
# FSx for Lustre SSD storage: 1200, 2400, then steps of 2400 GiB (3600 for SCRATCH_1).
FSX_CAPACITY_STEP_GIB = {"SCRATCH_1": 3600, "SCRATCH_2": 2400, "PERSISTENT_1": 2400, "PERSISTENT_2": 2400}
FSX_MAX_CAPACITY_GIB = 2_400 * 1000
# MB/s per TiB of storage, SSD only.
FSX_THROUGHPUT_PER_TIB = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}
MAX_RUNTIME_SECONDS = 30 * 24 * 3600
MIN_RUNTIME_SECONDS = 60
# teardown.keep_for: at least the janitor's grace period's minimum (JanitorGraceMinutes).
MIN_KEEP_FOR_SECONDS = 10 * 60
# workload.node_bootstrap_timeout: how long a job may wait for compute nodes that are not up
# before the run fails (ComputeNodesFailed). 30m is ParallelCluster's own wait for a node to
# bootstrap (clustermgtd's node_replacement_timeout, 1800 s, aws-parallelcluster-node
# src/slurm_plugin/clustermgtd.py); at most 1 day, at least 1 minute.
NODE_BOOTSTRAP_TIMEOUT = "30m"
MAX_NODE_BOOTSTRAP_SECONDS = 24 * 3600
# workload.retries: resubmissions of a train job that failed for an infrastructure reason
# (trainrun.logic.job_failure); without the field, RESUME_RETRIES with workload.resume, else none.
MAX_RETRIES = 10
RESUME_RETRIES = 2
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# The container image of a `cluster.kind: eks` run's jobs unless cluster.eks.image names another:
# the AWS Neuron Deep Learning Container for PyTorch training of the Neuron release a ParallelCluster
# run's nodes install (trainrun.logic.neuron_install.NEURON_VERSIONS: Neuron 2.29.0, torch-neuronx for
# PyTorch 2.9). Tags read <PyTorch>-neuronx-py<Python>-sdk<Neuron release>-<OS> (AWS Neuron
# documentation, "Update PyTorch in a Deep Learning Container"; the aws-neuron/deep-learning-containers
# README lists this one); tests/unit/test_run_file_eks.py checks it names the pinned release.
NEURON_TRAINING_IMAGE = "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.0-ubuntu24.04"


# `git check-ref-format` (with --allow-onelevel) refuses these anywhere in a ref name.
_GIT_REF_FORBIDDEN_CHARACTERS = " ~^:?*[\\"


def git_ref_format_problem(ref: str) -> str | None:
    """Why `git check-ref-format --allow-onelevel` refuses `ref`, or None when git accepts it.

    The rules of git's check-ref-format documentation (refs.c check_refname_format): no component
    starts with '.' or ends with '.lock'; no '..', no '@{', no ASCII control character, space or
    any of ~^:?*[\\; no empty component (leading, trailing or doubled '/'); no trailing '.'; not '@'.
    """
    if not ref:
        return "is empty"
    if ref == "@":
        return "is '@', which git reads as HEAD"
    for character in ref:
        if ord(character) < 0x20 or ord(character) == 0x7F:
            return f"contains the control character {character!r}"
        if character in _GIT_REF_FORBIDDEN_CHARACTERS:
            return f"contains {character!r}, which git does not allow in a ref"
    for sequence in ("..", "@{"):
        if sequence in ref:
            return f"contains {sequence!r}, which git does not allow in a ref"
    for component in ref.split("/"):
        if not component:
            return "has an empty component (a leading, trailing or doubled '/')"
        if component.startswith("."):
            return f"has a component starting with '.' ({component!r})"
        if component.endswith(".lock"):
            return f"has a component ending with '.lock' ({component!r})"
    if ref.endswith("."):
        return "ends with '.'"
    return None


def _git_ref_format(ref: str) -> str:
    problem = git_ref_format_problem(ref)
    if problem is not None:
        raise ValueError(f"{ref!r} is not a ref git accepts: it {problem}; name a branch, tag or commit")
    return ref


# Characters no shell field may hold: a NUL cannot be passed in an argument and bash drops it
# from a script; the other C0 controls but tab and newline (CR included), and DEL, are invisible
# and change what bash reads; a lone surrogate is not text at all (it has no UTF-8 encoding).
_SHELL_FORBIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")


def _shell_text(value: str) -> str:
    found = _SHELL_FORBIDDEN.search(value)
    if found is not None:
        character = found.group()
        line = value.count("\n", 0, found.start()) + 1
        raise ValueError(
            f"contains {character!r} (U+{ord(character):04X}) on line {line} of the command, a character no shell "
            "command can hold; remove it (of the control characters, only tab and newline are allowed)"
        )
    return value


def _no_parent_segments(value: str) -> str:
    # The patterns allow dots in names; a whole '..' segment would leave /fsx or the workload.
    if ".." in value.split("/"):
        raise ValueError("must not contain '..' segments: it must stay inside /fsx or the workload")
    return value


# Strictly patterned strings: every one of these may reach a command line (shell-quoted).
ReservationId = Annotated[str, StringConstraints(pattern=RESERVATION_ID, max_length=2048)]
ReservationGroupArn = Annotated[str, StringConstraints(pattern=RESERVATION_GROUP_ARN, max_length=2048)]
AvailabilityZone = Annotated[str, StringConstraints(pattern=AVAILABILITY_ZONE, max_length=2048)]
VpcId = Annotated[str, StringConstraints(pattern=VPC_ID, max_length=2048)]
SubnetId = Annotated[str, StringConstraints(pattern=SUBNET_ID, max_length=2048)]
FileSystemId = Annotated[str, StringConstraints(pattern=FILE_SYSTEM_ID, max_length=2048)]
AmiId = Annotated[str, StringConstraints(pattern=AMI_ID, max_length=32)]
Ec2InstanceType = Annotated[str, StringConstraints(pattern=EC2_INSTANCE_TYPE, max_length=64)]
GitUrl = Annotated[str, StringConstraints(pattern=GIT_URL, max_length=512)]
GitRef = Annotated[str, StringConstraints(pattern=GIT_REF, max_length=2048), AfterValidator(_git_ref_format)]
S3Uri = Annotated[str, StringConstraints(pattern=S3_URI, max_length=1024)]
FsxPath = Annotated[str, StringConstraints(pattern=FSX_PATH, max_length=512), AfterValidator(_no_parent_segments)]
# A directory on the submitter's machine, relative to the run file's directory ('..' allowed: it
# is read there, by `trainrun submit`, never by the run).
LocalPath = Annotated[str, StringConstraints(pattern=LOCAL_PATH, max_length=1024)]
RelativePath = Annotated[
    str, StringConstraints(pattern=RELATIVE_PATH, max_length=2048), AfterValidator(_no_parent_segments)
]
EnvValue = Annotated[str, StringConstraints(pattern=ENV_VALUE, max_length=4096)]
Duration = Annotated[str, StringConstraints(pattern=DURATION, max_length=16)]
RunName = Annotated[str, StringConstraints(pattern=RUN_NAME, max_length=40)]
RunNameOrId = Annotated[str, StringConstraints(pattern=RUN_NAME_OR_ID, max_length=80)]
Region = Annotated[str, StringConstraints(pattern=REGION, max_length=32)]
SnsTopicArn = Annotated[str, StringConstraints(pattern=SNS_TOPIC_ARN, max_length=1024)]
ContainerImage = Annotated[str, StringConstraints(pattern=CONTAINER_IMAGE, max_length=512)]


ShellCommand = Annotated[str, StringConstraints(min_length=1, max_length=16_384), AfterValidator(_shell_text)]

# --- the Neuron compile cache (trainrun.logic.compile_cache) ---------------------------------
COMPILE_CACHE_OFF = "off"


def _compile_cache(value: Any) -> Any:
    """`off` (YAML 1.1, which PyYAML reads, makes an unquoted `off` the boolean false) or an S3 URI
    of the cache's prefix. Runs before the field's own type check."""
    fix = "give off, or the S3 prefix of a cache (s3://my-bucket/neuron-compile-cache/)"
    if value is False or value == COMPILE_CACHE_OFF:
        return COMPILE_CACHE_OFF
    if value is True:
        raise ValueError(f"true is not a cache location: leave the field out for the stack's cache, or {fix}")
    if not isinstance(value, str):
        raise ValueError(f"{_shown(value)} is not text: {fix}")
    if len(value) > 1024 or re.fullmatch(S3_URI, value) is None:
        raise ValueError(f"{_shown(value)} is neither off nor an S3 URI (s3://bucket/prefix/): {fix}")
    return value


CompileCache = Annotated[str, BeforeValidator(_compile_cache)]


def env_name_problem(name: str) -> str | None:
    """Why a run cannot set the environment variable `name`, or None when it can (a valid name)."""
    if re.fullmatch(ENV_NAME, name) is None:
        return f"{name!r} is not an environment variable name (letters, digits and _, not starting with a digit)"
    if name in SHELL_RESERVED_ENV_NAMES:
        return f"{name!r} is a name the shell reserves; choose another"
    why = RESERVED_ENV_NAMES.get(name) or next(
        (why for prefix, why in RESERVED_ENV_PREFIXES.items() if name.startswith(prefix)), None
    )
    if name.startswith(STAND_IN_WORKLOAD_ENV_PREFIX):
        why = None
    return None if why is None else f"{name!r} cannot be set by a run: {why}"


def _not_reserved(name: str) -> str:
    problem = env_name_problem(name)
    if problem is not None:
        raise ValueError(problem)
    return name


EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME), AfterValidator(_not_reserved)]


class StrictModel(BaseModel):
    """Unknown keys are errors; values are never coerced (YAML `16` is not `"16"`)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Capacity(StrictModel):
    reservation_id: ReservationId | None = None
    reservation_group_arn: ReservationGroupArn | None = None
    instance_type: str
    nodes: Annotated[int, Field(ge=1, le=128)]
    availability_zone: AvailabilityZone | None = None

    @field_validator("instance_type")
    @classmethod
    def _trainium_only(cls, value: str) -> str:
        if value not in TRAINIUM_INSTANCE_TYPES:
            # Only a Trainium family is a typo of one: inf2.48xlarge is close in letters, not in meaning.
            meant = closest(value, TRAINIUM_INSTANCE_TYPES) if value.lower().startswith("trn") else None
            hint = f"did you mean {meant!r}? The Trainium types are" if meant else "use one of"
            raise ValueError(f"{value!r} is not a Trainium instance type; {hint} {', '.join(TRAINIUM_INSTANCE_TYPES)}")
        return value

    @model_validator(mode="after")
    def _exactly_one_target(self) -> Capacity:
        if (self.reservation_id is None) == (self.reservation_group_arn is None):
            raise ValueError("give exactly one of reservation_id or reservation_group_arn")
        return self


class ExistingNetwork(StrictModel):
    vpc_id: VpcId
    public_subnet_id: SubnetId
    private_subnet_id: SubnetId


class Network(StrictModel):
    """Either a CIDR for a new VPC, or the ids of an existing VPC and its two subnets."""

    vpc_cidr: str | None = None
    vpc_id: VpcId | None = None
    public_subnet_id: SubnetId | None = None
    private_subnet_id: SubnetId | None = None

    @field_validator("vpc_cidr")
    @classmethod
    def _ipv4_block(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            network = ipaddress.IPv4Network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IPv4 CIDR block such as 10.0.0.0/16 ({exc})") from None
        # A VPC is /16../28; we cut it into a public and a private half, each at least /28.
        if not 16 <= network.prefixlen <= 27:
            raise ValueError(f"prefix /{network.prefixlen} is outside /16 to /27")
        return value

    @model_validator(mode="after")
    def _new_or_existing(self) -> Network:
        existing = [self.vpc_id, self.public_subnet_id, self.private_subnet_id]
        if any(existing) and self.vpc_cidr is not None:
            raise ValueError("give either vpc_cidr (a new VPC) or vpc_id with both subnet ids, not both")
        if any(existing) and not all(existing):
            raise ValueError("an existing network needs vpc_id, public_subnet_id and private_subnet_id")
        return self

    @property
    def existing(self) -> ExistingNetwork | None:
        if self.vpc_id and self.public_subnet_id and self.private_subnet_id:
            return ExistingNetwork(
                vpc_id=self.vpc_id, public_subnet_id=self.public_subnet_id, private_subnet_id=self.private_subnet_id
            )
        return None

    @property
    def cidr(self) -> str:
        return self.vpc_cidr or "10.0.0.0/16"


class Fsx(StrictModel):
    """A new FSx for Lustre file system, or an existing one by id.

    Each size is checked against the deployment type by a field validator (not one model
    validator), so that every size problem is reported, each at its own field, even when another
    field is invalid too. Fields are validated in this order: the deployment type comes first.
    """

    file_system_id: FileSystemId | None = None
    deployment_type: Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"] | None = None
    storage_capacity_gib: int | None = None
    throughput_per_tib: int | None = None
    data_repository: S3Uri | None = None

    @field_validator("deployment_type", "storage_capacity_gib", "throughput_per_tib", "data_repository")
    @classmethod
    def _new_file_system_only(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and info.data.get("file_system_id") is not None:
            raise ValueError("applies to a new file system only, not to an existing file_system_id: remove it")
        return value

    @field_validator("storage_capacity_gib")
    @classmethod
    def _capacity_aws_accepts(cls, capacity: int | None, info: ValidationInfo) -> int | None:
        deployment = _deployment_type(info)
        if capacity is None or deployment is None:
            return capacity
        step = FSX_CAPACITY_STEP_GIB[deployment]
        if capacity not in (1200, 2400) and (capacity < step or capacity % step or capacity > FSX_MAX_CAPACITY_GIB):
            raise ValueError(
                f"{capacity} is not accepted for {deployment}: "
                f"use 1200, 2400 or a multiple of {step} up to {FSX_MAX_CAPACITY_GIB}"
            )
        return capacity

    @field_validator("throughput_per_tib")
    @classmethod
    def _throughput_aws_accepts(cls, throughput: int | None, info: ValidationInfo) -> int | None:
        deployment = _deployment_type(info)
        if throughput is None or deployment is None:
            return throughput
        allowed = FSX_THROUGHPUT_PER_TIB.get(deployment)
        if allowed is None:
            raise ValueError(f"does not apply to {deployment}; remove it")
        if throughput not in allowed:
            raise ValueError(
                f"{throughput} is not accepted for {deployment}: use one of {', '.join(map(str, allowed))}"
            )
        return throughput

    @field_validator("data_repository")
    @classmethod
    def _repository_needs_persistent_2(cls, repository: str | None, info: ValidationInfo) -> str | None:
        deployment = _deployment_type(info)
        if repository is not None and deployment is not None and deployment != "PERSISTENT_2":
            raise ValueError(f"needs deployment_type PERSISTENT_2 (data repository associations), not {deployment}")
        return repository

    @property
    def effective_deployment_type(self) -> str:
        return self.deployment_type or "PERSISTENT_2"

    @property
    def effective_storage_capacity_gib(self) -> int:
        return self.storage_capacity_gib if self.storage_capacity_gib is not None else 1200

    @property
    def effective_throughput_per_tib(self) -> int | None:
        if self.throughput_per_tib is not None:
            return self.throughput_per_tib
        defaults = FSX_THROUGHPUT_PER_TIB.get(self.effective_deployment_type)
        return defaults[1] if defaults else None


def _deployment_type(info: ValidationInfo) -> str | None:
    """The file system's deployment type (PERSISTENT_2 when not given), or None when it is invalid:
    a size cannot be checked against a type that is not known."""
    if "deployment_type" not in info.data:
        return None
    return info.data["deployment_type"] or "PERSISTENT_2"


class Storage(StrictModel):
    fsx: Fsx = Field(default_factory=Fsx)


class Eks(StrictModel):
    """What only an EKS cluster (`cluster.kind: eks`) needs; without the section, these defaults.

    The endpoint defaults are CreateCluster's own (Amazon EKS User Guide, "Cluster API server
    endpoint"): the Kubernetes API reachable from the internet (with IAM authentication), not
    from inside the VPC through private endpoints.
    """

    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    image: ContainerImage = NEURON_TRAINING_IMAGE
    endpoint_public_access: bool = True
    endpoint_private_access: bool = False

    @field_validator("kubernetes_version")
    @classmethod
    def _one_eks_creates(cls, value: str) -> str:
        if value in SUPPORTED_KUBERNETES_VERSIONS:
            return value
        written = re.fullmatch(r"1\.([1-9][0-9]{0,2})", value)
        minor = int(written.group(1)) if written else None
        minors = [int(version.removeprefix("1.")) for version in SUPPORTED_KUBERNETES_VERSIONS]
        if minor is not None and minor < min(minors):
            why = "is past the end of its Amazon EKS extended support: EKS creates no cluster of it"
        elif minor is not None and minor > max(minors):
            why = "is newer than the EKS versions this trainrun knows (trainrun/logic/eks_versions.py)"
        else:
            why = f"is not a Kubernetes minor version Amazon EKS offers, such as {DEFAULT_KUBERNETES_VERSION!r}"
        supported = ", ".join(SUPPORTED_KUBERNETES_VERSIONS)
        raise ValueError(f"{value!r} {why}; use one of {supported} (the default is {DEFAULT_KUBERNETES_VERSION})")

    @model_validator(mode="after")
    def _api_reachable(self) -> Eks:
        if not (self.endpoint_public_access or self.endpoint_private_access):
            raise ValueError(
                "endpoint_public_access and endpoint_private_access are both false, so nothing could reach the "
                "cluster's Kubernetes API (EKS turns public access off only with private access on): set "
                "endpoint_public_access: true (the default), or endpoint_private_access: true for an API "
                "reachable from inside the VPC"
            )
        if not self.endpoint_public_access:
            raise ValueError(
                "endpoint_public_access is false, but trainrun's functions run outside the run's VPC and reach the "
                "cluster's Kubernetes API (its jobs, their status) through the public endpoint, with IAM "
                "authentication: set endpoint_public_access: true (the default); endpoint_private_access: true "
                "adds the private endpoint for the nodes"
            )
        return self


# The cluster fields that describe a ParallelCluster cluster only: what each is, and why an EKS
# cluster has no use for it (what the run file says when a kind: eks run gives one).
PARALLELCLUSTER_ONLY_FIELDS = {
    "os": "is the OS of a ParallelCluster cluster's nodes; an EKS node group runs the EKS-optimized Amazon "
    "Linux 2023 Neuron AMI (AL2023_x86_64_NEURON), and the workload runs in the container image cluster.eks.image",
    "head_node_instance_type": "is the instance type of the Slurm head node, which an EKS cluster does not have "
    "(EKS runs its control plane)",
    "custom_ami": "is the image of a ParallelCluster cluster's nodes; an EKS node group runs the EKS-optimized "
    "Amazon Linux 2023 Neuron AMI that EKS releases for the cluster's Kubernetes version",
    "reuse": "names a kept ParallelCluster cluster to run on; an EKS run creates its own cluster (running on a "
    "kept EKS cluster is not supported)",
}


class Cluster(StrictModel):
    # What runs the training: AWS ParallelCluster (Slurm), or Amazon EKS (cluster.eks).
    kind: Literal["parallelcluster", "eks"] = "parallelcluster"
    os: str = "ubuntu2204"
    head_node_instance_type: Ec2InstanceType = "c5.4xlarge"
    custom_ami: AmiId | None = None
    # Run on the cluster an earlier run kept (its run name, meaning its latest run, or its run id)
    # instead of creating one: see RunSpec._reuse_describes_no_cluster and trainrun.logic.cluster_reuse.
    reuse: RunNameOrId | None = None
    eks: Eks | None = None

    @property
    def eks_settings(self) -> Eks:
        """The EKS settings of a kind: eks cluster: its cluster.eks, or the defaults without one."""
        return self.eks or Eks()

    @field_validator("os")
    @classmethod
    def _supported_os(cls, value: str) -> str:
        # The OSes worth suggesting are the ones a run can use: those the pinned Neuron release serves.
        usable = supported_os()
        if value in RETIRED_OSES:
            successor = RETIRED_OSES[value]
            fix = (
                f"use {successor!r}"
                if successor in usable
                else f"use {' or '.join(map(repr, usable))} (its successor {successor!r} cannot run the Neuron SDK)"
            )
            raise ValueError(f"{value!r} is no longer supported by ParallelCluster 3.16; {fix}")
        if value not in PCLUSTER_OSES:
            meant = closest(value, usable)
            hint = f"did you mean {meant!r}? The supported ones are" if meant else "use one of"
            raise ValueError(f"{value!r} is not a ParallelCluster 3.16 OS; {hint} {', '.join(usable)}")
        return value

    @model_validator(mode="after")
    def _fields_of_its_kind(self) -> Cluster:
        """A field of the other kind of cluster would describe nothing: each is refused, with why."""
        if self.kind == "parallelcluster":
            if self.eks is not None:
                raise _inconsistent(
                    (
                        "eks",
                        "describes an EKS cluster, but cluster.kind is parallelcluster (the default): set "
                        "cluster.kind: eks, or remove cluster.eks",
                    )
                )
            return self
        # A default is not a choice: only the fields the run file gives are refused.
        problems = [
            (field, f"{getattr(self, field)!r} {why}: remove it (or set cluster.kind: parallelcluster)")
            for field, why in PARALLELCLUSTER_ONLY_FIELDS.items()
            if field in self.model_fields_set and getattr(self, field) is not None
        ]
        if problems:
            raise _inconsistent(*problems)
        return self

    @model_validator(mode="after")
    def _os_can_run_the_cluster(self) -> Cluster:
        if self.kind == "eks":  # its nodes run EKS's Neuron AMI, whatever `os` defaults to
            return self
        problems = []
        if self.os in PCLUSTER_OSES_WITHOUT_OFFICIAL_AMI and self.custom_ami is None:
            problems.append(
                (
                    "custom_ami",
                    f"is required for os {self.os}: ParallelCluster publishes no official {self.os} AMI; build one "
                    "with `pcluster build-image` and set cluster.custom_ami to its id (ami-...), or choose an os "
                    "with an official AMI",
                )
            )
        # Every node installs the Neuron SDK (trainrun.logic.neuron_install): an OS the pinned
        # release cannot serve would fail every node's OnNodeConfigured.
        reason = unsupported_os_reason(self.os)
        if reason is not None:
            problems.append(
                ("os", f"{self.os!r} cannot run the Neuron SDK: {reason}; use {' or '.join(map(repr, supported_os()))}")
            )
        if problems:
            raise _inconsistent(*problems)
        return self


class Source(StrictModel):
    """Where the workload comes from: a git repository at a ref, an S3 tarball, or a directory
    beside the run file, which `trainrun submit` packs and uploads as an S3 tarball
    (trainrun.ops.source_archive; no run reads the user's disk)."""

    git: GitUrl | None = None
    ref: GitRef | None = None
    s3: S3Uri | None = None
    path: LocalPath | None = None

    @model_validator(mode="after")
    def _git_or_s3(self) -> Source:
        if [self.git, self.s3, self.path].count(None) != 2:
            raise ValueError("give exactly one of git (with an optional ref), s3 or path (a directory to pack)")
        problems = []
        if self.git is None and self.ref is not None:
            problems.append(("ref", "applies to a git source only"))
        if self.s3 is not None and not self.s3.endswith((".tar.gz", ".tgz", ".tar")):
            problems.append(("s3", "must name a .tar.gz, .tgz or .tar archive"))
        if problems:
            raise _inconsistent(*problems)
        return self


class Dataset(StrictModel):
    source: S3Uri
    path: FsxPath


class Workload(StrictModel):
    source: Source
    workdir: RelativePath = "."
    setup: ShellCommand | None = None
    dataset: Dataset | None = None
    compile: ShellCommand | None = None
    train: ShellCommand
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=128)
    max_runtime: Duration = "24h"
    node_bootstrap_timeout: Duration = NODE_BOOTSTRAP_TIMEOUT
    # How many steps the train job runs: the total of `trainrun watch`'s progress bar and ETA.
    # Informational only (the workload decides when it stops); without it the bar has no total.
    total_steps: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    # The train job's progress line, when it prints none of the formats trainrun reads
    # (trainrun.logic.job_log.TRAIN_FORMATS): a Python regular expression with named groups
    # (step and/or loss; epoch, learning_rate, throughput, grad_norm optional).
    progress_pattern: str | None = None

    @field_validator("progress_pattern")
    @classmethod
    def _progress_pattern_usable(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                compile_progress_pattern(value)
            except ValueError as exc:
                raise ValueError(f"{value!r} {exc}") from exc
        return value

    # Where the compile and train jobs' Neuron compile cache is (NEURON_COMPILE_CACHE_URL): unset,
    # the stack's cache for the instance type; an S3 prefix; or `off` (trainrun.logic.compile_cache).
    compile_cache: CompileCache | None = None
    # Checkpoints: an S3 prefix (an earlier run's exported checkpoints, see
    # trainrun.logic.checkpoints) staged into TRAINRUN_CHECKPOINT_DIR before the first attempt.
    resume_from: S3Uri | None = None

    @field_validator("resume_from")
    @classmethod
    def _resume_from_prefix(cls, value: str | None) -> str | None:
        if value is None:
            return None
        key = value.removeprefix("s3://").partition("/")[2]
        if not key.strip("/"):
            raise ValueError(
                f"{value!r} names a whole bucket; name the prefix that holds the checkpoints, "
                "e.g. s3://BUCKET/checkpoints/RUN_ID/ (a run's summary shows where its checkpoints went)"
            )
        if "//" in key:
            raise ValueError(f"{value!r} has an empty path segment ('//'); S3 would read it as another prefix")
        # One form for every reader: the prefix as a directory (a key 'step-1' never matches 'step-10').
        return value if value.endswith("/") else value + "/"

    # Resume after failure: what a resubmission of the train job runs instead of `train` (a
    # shell field like it), and how many resubmissions a run may make (see `retries`).
    resume: ShellCommand | None = None
    retries: Annotated[int, Field(ge=0, le=MAX_RETRIES)] | None = None

    @field_validator("max_runtime")
    @classmethod
    def _runtime_bounds(cls, value: str) -> str:
        seconds = duration_seconds(value)
        if not MIN_RUNTIME_SECONDS <= seconds <= MAX_RUNTIME_SECONDS:
            raise ValueError(f"{value!r} is outside 1m to 30d")
        return value

    @property
    def max_runtime_seconds(self) -> int:
        return duration_seconds(self.max_runtime)

    @field_validator("node_bootstrap_timeout")
    @classmethod
    def _bootstrap_bounds(cls, value: str) -> str:
        seconds = duration_seconds(value)
        if not MIN_RUNTIME_SECONDS <= seconds <= MAX_NODE_BOOTSTRAP_SECONDS:
            raise ValueError(
                f"{value!r} is outside 1m to 1d; ParallelCluster itself waits 30m for a node to bootstrap "
                f"(the default, {NODE_BOOTSTRAP_TIMEOUT})"
            )
        return value

    @property
    def node_bootstrap_timeout_seconds(self) -> int:
        return duration_seconds(self.node_bootstrap_timeout)

    @property
    def train_retries(self) -> int:
        """Resubmissions of the train job allowed after an infrastructure failure: `retries`, else
        RESUME_RETRIES when the run says how to resume, else none."""
        if self.retries is not None:
            return self.retries
        return RESUME_RETRIES if self.resume is not None else 0

    def train_command(self, attempt: int) -> str:
        """What the train job's `attempt` (1, 2, ...) runs: `resume` for a resubmission, if given."""
        return self.resume if attempt > 1 and self.resume is not None else self.train


class Teardown(StrictModel):
    on_success: Literal["delete", "keep"] = "delete"
    on_failure: Literal["delete", "keep"] = "delete"
    keep_file_system: bool = False
    # How long a kept cluster may stay idle (no run on it) before the janitor tears it down
    # (trainrun.steps.janitor); unset, it stays until `trainrun down`.
    keep_for: Duration | None = None

    @field_validator("keep_for")
    @classmethod
    def _keep_for_bounds(cls, value: str | None) -> str | None:
        if value is not None and not MIN_KEEP_FOR_SECONDS <= duration_seconds(value) <= MAX_RUNTIME_SECONDS:
            raise ValueError(
                f"{value!r} is outside 10m to 30d: give how long the kept cluster may stay idle, such as 2h "
                "(the janitor sweeps on its schedule, JanitorSchedule, hourly by default)"
            )
        return value

    @model_validator(mode="after")
    def _keep_for_keeps_something(self) -> Teardown:
        if self.keep_for is not None and "keep" not in (self.on_success, self.on_failure):
            raise _inconsistent(
                (
                    "keep_for",
                    f"{self.keep_for!r} says how long a kept cluster stays idle, but on_success and on_failure are "
                    "both delete, so nothing is kept: set on_success: keep (or on_failure: keep), or remove keep_for",
                )
            )
        return self


class Notify(StrictModel):
    """Where the run's state changes are sent besides the account's default EventBridge bus."""

    sns_topic_arn: SnsTopicArn | None = None


class Budget(StrictModel):
    """The most the run may cost, by the plan's price table: the budget guard (docs/run-file.md,
    "Budget guard") stops the job with its grace period and tears the run down when it is spent."""

    max_cost_usd: Annotated[float, Field(allow_inf_nan=False)]

    @field_validator("max_cost_usd")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError(f"{value:g} is not a cost: give the most the run may cost in US dollars, such as 5000")
        return value


class RunSpec(StrictModel):
    """A whole run file. Its JSON form is stored in the run record, so it has a byte budget."""

    name: RunName
    region: Region | None = None
    capacity: Capacity
    network: Network = Field(default_factory=Network)
    storage: Storage = Field(default_factory=Storage)
    cluster: Cluster = Field(default_factory=Cluster)
    workload: Workload
    teardown: Teardown = Field(default_factory=Teardown)
    notify: Notify = Field(default_factory=Notify)
    budget: Budget | None = None

    # A field validator on `capacity` (not a model validator) so that the check runs, and is
    # reported with the others, even when an unrelated field such as the workload is invalid.
    @field_validator("capacity")
    @classmethod
    def _region_consistent(cls, capacity: Capacity, info: ValidationInfo) -> Capacity:
        region = info.data.get("region")
        if region is None:
            return capacity
        zone = capacity.availability_zone
        problems = []
        if zone and zone[:-1] != region:
            problems.append(("availability_zone", f"{zone} is not in region {region}"))
        arn = capacity.reservation_group_arn
        if arn and arn.split(":")[3] != region:
            problems.append(("reservation_group_arn", f"is in {arn.split(':')[3]}, but region is {region}"))
        if problems:
            raise _inconsistent(*problems)
        return capacity

    def stored(self) -> dict[str, Any]:
        """The spec as the run record stores it: its JSON form, without the optional fields left unset."""
        stored = self.model_dump(mode="json", exclude_none=True)
        if self.cluster.reuse is not None:
            # A run on a kept cluster describes no cluster of its own: the defaults of os and
            # head_node_instance_type, stored, would read back as given (and so as a mistake).
            stored["cluster"] = {"reuse": self.cluster.reuse}
        elif self.cluster.kind == "eks":
            # Only what the run file gives: the ParallelCluster fields' defaults would read back as given
            # (and be refused), and a default Kubernetes version that trainrun later retires would make
            # the record unreadable.
            stored["cluster"] = self.cluster.model_dump(mode="json", exclude_unset=True)
        return stored

    @model_validator(mode="after")
    def _reuse_describes_no_cluster(self) -> RunSpec:
        """`cluster.reuse` runs on a cluster that exists: a field that describes the cluster, its
        network or its file system, or what its teardown keeps, would describe nothing."""
        reused = self.cluster.reuse
        if reused is None:
            return self
        on_it = f"cluster.reuse runs on the kept cluster of run {reused}"
        problems = [
            (
                f"network.{field}",
                f"{value!r} describes a network to create or use, but {on_it}, in its network: "
                "remove it (or remove cluster.reuse to create a cluster)",
            )
            for field, value in self.network.model_dump(exclude_none=True).items()
        ]
        problems += [
            (
                f"storage.fsx.{field}",
                f"{value!r} describes the cluster's file system, but {on_it}, with its "
                "file system: remove it (or remove cluster.reuse to create a cluster)",
            )
            for field, value in self.storage.fsx.model_dump(exclude_none=True).items()
        ]
        problems += [
            (
                f"cluster.{field}",
                f"{getattr(self.cluster, field)!r} describes a cluster to create, but {on_it}, "
                "as that cluster was made: remove it (or remove cluster.reuse to create a cluster)",
            )
            for field in ("os", "head_node_instance_type", "custom_ami")
            if field in self.cluster.model_fields_set
        ]
        problems += [
            (
                f"teardown.{field}",
                f"{value!r} keeps what the run created, but a run with cluster.reuse creates "
                f"nothing to keep: the cluster stays for run {reused}'s own teardown (`trainrun down {reused}`); "
                "remove it",
            )
            for field, value in (
                ("on_success", self.teardown.on_success),
                ("on_failure", self.teardown.on_failure),
                ("keep_file_system", self.teardown.keep_file_system),
            )
            if value in ("keep", True)
        ]
        if problems:
            raise _inconsistent(*problems)
        return self

    @model_validator(mode="after")
    def _fits_the_run_record(self) -> RunSpec:
        # Aliases, escapes and non-ASCII text make the stored form larger than the file; the run
        # record (one DynamoDB item) keeps it whole, so it is bounded here, before anything exists.
        size = len(encode_json(self.stored()).encode())
        if size > MAX_SPEC_BYTES:
            raise ValueError(
                f"the run file's content is {size} bytes once stored in the run record (as UTF-8 JSON, with "
                f"aliases expanded); at most {MAX_SPEC_BYTES}: shorten workload.setup, compile, train or env "
                "(a long script belongs in the workload's source)"
            )
        return self


def environment_findings(spec: RunSpec) -> list[Finding]:
    """A WARNING for each variable of workload.env that a run may set but that usually breaks a Neuron job."""
    findings = []
    for name, value in spec.workload.env.items():
        why = RISKY_ENV_NAMES.get(name)
        if name == "FI_PROVIDER" and value != "efa":
            why = (
                f"libfabric would use the {value!r} provider instead of EFA, which the Neuron multi-node "
                "guides use (FI_PROVIDER=efa) for collectives between nodes"
            )
        if why is not None:
            findings.append(
                Finding(
                    code=Code.ENVIRONMENT_VARIABLE_RISKY,
                    severity=Severity.WARNING,
                    message=f"workload.env.{name}: {why}",
                )
            )
    return findings


def _inconsistent(*problems: tuple[str, str]) -> PydanticCustomError:
    """Problems with sub-fields (field, message) found by a check on their parent: one error, which
    `_problems` reports as one problem at each sub-field."""
    message = "; ".join(f"{field}: {text}" for field, text in problems)
    return PydanticCustomError("inconsistent_fields", "{message}", {"problems": list(problems), "message": message})


def duration_seconds(value: str) -> int:
    match = re.fullmatch(DURATION, value)
    if match is None:
        raise ValueError(f"{value!r} is not a duration such as 90m, 24h or 2d")
    return int(match.group(1)) * DURATION_UNITS[match.group(2)]


# --- loading --------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; in a run file that hides a mistake."""


def _mapping_without_duplicates(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # a list or mapping as a key
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a plain value, not {type(key).__name__}", key_node.start_mark
            ) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)

# No field takes an integer longer than this; a longer one is reported as the field's problem
# instead of reaching int() (Python refuses more than 4,300 digits, and the conversion is quadratic).
MAX_INTEGER_CHARACTERS = 32


class OversizedInteger:
    """A YAML integer too long to be any field's value: it fails the field's validation by type."""

    def __init__(self, length: int):
        self.length = length

    def __repr__(self) -> str:
        return f"<an integer of {self.length} characters>"


def _bounded_integer(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> int | OversizedInteger:
    if len(node.value) > MAX_INTEGER_CHARACTERS:
        return OversizedInteger(len(node.value))
    return loader.construct_yaml_int(node)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _bounded_integer)

MAX_RUN_FILE_BYTES = 256 * 1024


def parse_run_file(text: str | bytes) -> RunSpec:
    """Parse and validate a run file; raise RunSpecInvalid listing every problem by field path and line."""
    size = len(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    if size > MAX_RUN_FILE_BYTES:
        raise RunSpecInvalid([(WHOLE_FILE, f"is {size} bytes; a run file is at most {MAX_RUN_FILE_BYTES}")])
    try:
        root, document, problems = _load(text)
    except yaml.MarkedYAMLError as exc:
        raise RunSpecInvalid([_unclosed_quote(text, exc) or _syntax_problem(exc)]) from None
    except yaml.YAMLError as exc:  # not text PyYAML can read (an undecodable byte, a control character)
        raise RunSpecInvalid([(WHOLE_FILE, f"is not valid YAML: {exc}".replace("\n", " "))]) from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise RunSpecInvalid([(WHOLE_FILE, "is nested too deeply to be a run file")]) from None
    if not isinstance(document, dict):
        raise RunSpecInvalid([*problems, (WHOLE_FILE, "must be a YAML mapping with name, capacity and workload")])
    try:
        spec = RunSpec.model_validate(document)
    except ValidationError as exc:
        problems += _problems(exc, RunSpec, root)
    if problems:
        # In the order of the file (pydantic reports unknown keys after the known fields); then
        # the problems of the whole document, which have no line.
        problems.sort(key=lambda problem: (problem.line is None, problem.line or 0))
        raise RunSpecInvalid(problems)
    return spec


def written_name(text: str | bytes) -> str | None:
    """The `name` of a run file that is invalid otherwise, when that field is readable and valid."""
    if len(text) > MAX_RUN_FILE_BYTES:
        return None
    try:
        _, document, _ = _load(text)
        name = document.get("name") if isinstance(document, dict) else None
        return TypeAdapter(RunName).validate_python(name) if isinstance(name, str) else None
    except (yaml.YAMLError, RecursionError, ValidationError):
        return None


# --- reading the YAML, and where each field is in it ------------------------------------------

# What PyYAML says when a tab is where it expects the next key or value.
_PYYAML_ON_A_TAB = "found character '\\t' that cannot start any token"
_LINE_BREAK = re.compile("(\r\n|[\r\n\x85\u2028\u2029])")  # what PyYAML counts as a line break
_TAB_WIDTHS = (2, 4, 8)


def _compose(text: str | bytes) -> tuple[yaml.Node | None, Any]:
    """The document's node tree (which keeps every node's line and column) and its value."""
    loader = _UniqueKeyLoader(text)
    try:
        root = loader.get_single_node()
        return root, loader.construct_document(root) if root is not None else None
    finally:
        loader.dispose()


def _load(text: str | bytes) -> tuple[yaml.Node | None, Any, list[Problem]]:
    """The node tree and the document, and a problem for each line indented with a tab.

    YAML indents with spaces only, and PyYAML stops at the first tab. So that the rest of the file
    is still checked, every tab in an indentation is then read as spaces, 2, 4 or 8 columns wide
    (the first width with which the whole file parses), and each such line is reported.
    """
    try:
        root, document = _compose(text)
        return root, document, []
    except yaml.MarkedYAMLError as exc:
        error = exc
    if error.problem != _PYYAML_ON_A_TAB or error.problem_mark is None:
        raise error
    try:
        source = text if isinstance(text, str) else text.decode("utf-8")
    except UnicodeDecodeError:  # UTF-16 (PyYAML reads it too): only the tab is reported
        raise error from None
    stopped_at = error.problem_mark.line
    parts = _LINE_BREAK.split(source)  # line, break, line, break, ..., line
    lines = parts[::2]
    tabbed = [number for number, line in enumerate(lines) if "\t" in _indentation(line)]
    if stopped_at not in tabbed:  # the tab is after a key or in a value, not in an indentation
        raise error
    furthest: tuple[int, int, yaml.MarkedYAMLError] | None = None  # where another syntax error is, the width
    for width in _TAB_WIDTHS:
        for number in tabbed:
            indentation = _indentation(lines[number])
            parts[2 * number] = indentation.expandtabs(width) + lines[number][len(indentation) :]
        try:
            root, document = _compose("".join(parts))
        except yaml.MarkedYAMLError as later:
            line = later.problem_mark.line if later.problem_mark is not None else -1
            if line > stopped_at and (furthest is None or line > furthest[0]):
                furthest = (line, width, later)
            continue
        return root, document, _tab_problems(lines, tabbed, width, root)
    if furthest is not None:  # past the tabs, the file has another syntax error: report both
        _, width, other = furthest
        raise RunSpecInvalid([*_tab_problems(lines, tabbed, width, None), _syntax_problem(other)])
    raise RunSpecInvalid(_tab_problems(lines, [stopped_at], None, None))


def _indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _tab_problems(lines: list[str], tabbed: list[int], width: int | None, root: yaml.Node | None) -> list[Problem]:
    """A problem for each line (0-based numbers) indented with a tab, but a line of a block scalar's
    text (`train: |`), where a tab after the indentation is the command's own."""
    in_text = _block_scalar_lines(root) if root is not None else set()
    read_as = f" (read here as {width} columns, to check the rest of the file)" if width else ""
    return [
        Problem(
            WHOLE_FILE,
            f"indented with a tab; YAML indents with spaces only: replace the tab with spaces{read_as}",
            line=number + 1,
            column=lines[number].index("\t") + 1,
        )
        for number in tabbed
        if number not in in_text
    ]


def _block_scalar_lines(node: yaml.Node) -> set[int]:
    """The (0-based) lines holding the text of the literal and folded scalars under `node`."""
    if isinstance(node, yaml.ScalarNode):
        return set(range(node.start_mark.line + 1, node.end_mark.line + 1)) if node.style in ("|", ">") else set()
    children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
    return set().union(*(_block_scalar_lines(child) for child in children))


def _syntax_problem(exc: yaml.MarkedYAMLError) -> Problem:
    """A YAML syntax error as PyYAML found it: what, where, and what it was reading when that began elsewhere.

    At the end of the file (an unclosed quote or bracket) the place that matters is where the
    unclosed thing began, so that is where the problem is.
    """
    problem, context, mark, began = exc.problem or "", exc.context, exc.problem_mark, exc.context_mark
    if problem == _PYYAML_ON_A_TAB:  # not in an indentation (those are found before): after a key, in a list
        message = "is not valid YAML: a tab where a key or a value should start; YAML separates with spaces only: "
        message += "replace the tab with a space"
    elif "end of stream" in problem and context and began is not None:
        message = f"is not valid YAML: {problem} {context} (the file ends before it is closed)"
        mark = began
    elif context and began is not None and mark is not None and began.line != mark.line:
        message = f"is not valid YAML: {problem} ({context} at line {began.line + 1}, column {began.column + 1})"
    else:
        message = f"is not valid YAML: {problem or context}"
    if mark is None:
        return Problem(WHOLE_FILE, message)
    return Problem(WHOLE_FILE, message, line=mark.line + 1, column=mark.column + 1)


def _unclosed_quote(text: str | bytes, exc: yaml.MarkedYAMLError) -> Problem | None:
    """A quote left open on one line runs on to the next quote in the file, which may be lines
    further down: PyYAML then fails there, on what follows that quote. The place to fix is where
    the quote opened: the last quoted value before the error that spans lines (a block mapping's
    value in quotes is almost always meant to be one line)."""
    mark = exc.problem_mark
    if mark is None:
        return None
    opened: yaml.ScalarToken | None = None
    try:
        for token in yaml.scan(text):
            if token.start_mark.index >= mark.index:
                break
            if isinstance(token, yaml.ScalarToken) and token.style in ('"', "'"):
                spans_lines = token.end_mark.line > token.start_mark.line
                opened = token if spans_lines else None
    except yaml.YAMLError:
        pass
    if opened is None:
        return None
    start, end = opened.start_mark, opened.end_mark
    message = (
        f"is not valid YAML: the {opened.style} opened here is not closed on its line; the next {opened.style} "
        f"closes it at line {end.line + 1}, and the file cannot be read from there ({exc.problem}): "
        f"close the quote on line {start.line + 1}"
    )
    return Problem(WHOLE_FILE, message, line=start.line + 1, column=start.column + 1)


class _Location(NamedTuple):
    line: int | None
    column: int | None
    # The scalar as the file writes it (`yes`, `0x10`, `600`), when the error is about a scalar's value.
    written: str | None


class _Positions:
    """Where each field is written in the document's node tree `root` (None: no tree, no places)."""

    def __init__(self, root: yaml.Node | None):
        self.root = root
        # Each mapping's pairs by key, built once: a file may have thousands of problems in one mapping.
        self._pairs: dict[int, dict[str, tuple[yaml.Node, yaml.Node]]] = {}

    def locate(self, loc: tuple[str | int, ...], *, at_key: bool) -> _Location:
        """Where the field at pydantic's `loc` is written: its value (its key when `at_key` or when
        the value is a mapping), or the key of its nearest parent that is written (a missing field)."""
        if self.root is None or not loc:  # a problem of the whole document has no one place
            return _Location(None, None, None)
        node, mark = self.root, self.root.start_mark
        for part in loc:
            if part == "[key]":  # a dict key's own error: the key found last
                return _Location(mark.line + 1, mark.column + 1, None)
            pair = self._pairs_of(node).get(str(part)) if isinstance(node, yaml.MappingNode) else None
            if pair is None:
                return _Location(mark.line + 1, mark.column + 1, None)
            key, node = pair
            mark = key.start_mark
        if at_key or not isinstance(node, yaml.ScalarNode):
            return _Location(mark.line + 1, mark.column + 1, None)
        return _Location(node.start_mark.line + 1, node.start_mark.column + 1, node.value)

    def _pairs_of(self, node: yaml.MappingNode) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if id(node) not in self._pairs:
            self._pairs[id(node)] = {
                key.value: (key, value) for key, value in node.value if isinstance(key, yaml.ScalarNode)
            }
        return self._pairs[id(node)]


# --- what each problem says -----------------------------------------------------------------

# Each pattern in words, with an example that matches it (tests/unit/test_runfile.py checks both).
PATTERN_WORDS: dict[str, tuple[str, str]] = {
    RUN_NAME: (
        "a run name: lower-case letters, digits and dashes, starting with a letter, at most 40 characters",
        "bert-phase1",
    ),
    REGION: ("an AWS region", "us-west-2"),
    AVAILABILITY_ZONE: ("an availability zone: a region and a letter", "us-west-2d"),
    RESERVATION_ID: ("a capacity reservation id: cr- and 17 hex digits", "cr-0123456789abcdef0"),
    RESERVATION_GROUP_ARN: (
        "the ARN of a resource group",
        "arn:aws:resource-groups:us-west-2:123456789012:group/trn1-odcrs",
    ),
    EC2_INSTANCE_TYPE: ("an EC2 instance type in lower case: family.size", "c5.4xlarge"),
    VPC_ID: ("a VPC id: vpc- and 8 or 17 hex digits", "vpc-0123456789abcdef0"),
    SUBNET_ID: ("a subnet id: subnet- and 8 or 17 hex digits", "subnet-0123456789abcdef0"),
    FILE_SYSTEM_ID: ("a file system id: fs- and 17 hex digits", "fs-0123456789abcdef0"),
    AMI_ID: ("an AMI id: ami- and 8 or 17 hex digits", "ami-0123456789abcdef0"),
    S3_URI: (
        "an S3 URI: s3://, a bucket name in lower case, then a key of letters, digits and _ . = + / -",
        "s3://my-bucket/datasets/wikicorpus",
    ),
    GIT_URL: (
        "a git URL: https://host/path or git@host:path",
        "https://github.com/aws-neuron/aws-neuron-samples.git",
    ),
    GIT_REF: (
        "a branch, tag or commit: letters, digits and _ . / -, not starting with - or /, at most 128 characters",
        "main",
    ),
    RELATIVE_PATH: (
        "a path inside the workload: letters, digits and _ . / -, not starting with / or -",
        "examples/bert",
    ),
    LOCAL_PATH: (
        "a directory relative to the run file's directory, on one line, not starting with / or ~",
        "./my-code",
    ),
    FSX_PATH: ("a path under /fsx: letters, digits and _ . - between the slashes", "/fsx/datasets"),
    ENV_NAME: ("an environment variable name: letters, digits and _, not starting with a digit", "NEURON_CC_FLAGS"),
    ENV_VALUE: ("text on one line, of printable ASCII characters", "--model-type=transformer"),
    DURATION: ("a number and a unit (s, m, h or d)", "30m"),
    SNS_TOPIC_ARN: ("the ARN of an SNS topic", "arn:aws:sns:us-west-2:123456789012:trainrun-runs"),
    CONTAINER_IMAGE: (
        "a container image with its registry, repository and a tag or @sha256: digest",
        NEURON_TRAINING_IMAGE,
    ),
    RUN_NAME_OR_ID: (
        "a run's name or run id: lower-case letters, digits and dashes, starting with a letter",
        "bert-phase1",
    ),
}


def _problems(exc: ValidationError, model: type[BaseModel], root: yaml.Node | None = None) -> list[Problem]:
    """Each of pydantic's errors validating `model` as a problem: the field, its value, what is wrong
    and the fix, and (from the document's node tree `root`) its line."""
    errors = exc.errors(include_url=False)
    # The field each unknown key was likely meant to be. A typo also makes that field missing: one
    # mistake, one problem.
    meant = {error["loc"]: _meant(model, error["loc"]) for error in errors if error["type"] == "extra_forbidden"}
    mistyped = {(*loc[:-1], field) for loc, field in meant.items() if field is not None}
    positions = _Positions(root)
    problems = []
    for error in errors:
        loc = error["loc"]
        if error["type"] == "missing" and loc in mistyped:
            continue
        if error["type"] == "inconsistent_fields":
            for field, message in error["ctx"]["problems"]:
                # A check of the whole file names its fields by their dotted paths (network.vpc_cidr).
                field_loc = (*loc, *field.split("."))
                where = positions.locate(field_loc, at_key=True)
                problems.append(Problem(_path(field_loc), message, where.line, where.column))
            continue
        where = positions.locate(loc, at_key=error["type"] in ("extra_forbidden", "missing"))
        if error["type"] == "extra_forbidden":
            message = f"is not a known field; did you mean {meant[loc]!r}?" if meant[loc] else "is not a known field"
        else:
            message = _message(error, where.written)
        problems.append(Problem(_path(loc), message, where.line, where.column))
    return problems


def _path(loc: tuple[str | int, ...]) -> str:
    return ".".join(str(part) for part in loc) or WHOLE_FILE


def _meant(model: type[BaseModel], loc: tuple[str | int, ...]) -> str | None:
    """The field an unknown key at `loc` of `model` was most likely meant to be (`nodes` for `node`), if any."""
    return closest(str(loc[-1]), _fields_at(model, loc[:-1]))


def _fields_at(model: type[BaseModel] | None, loc: tuple[str | int, ...]) -> list[str]:
    """The field names of the model at `loc` under `model`, or none where `loc` is not a model."""
    for part in loc:
        field = model.model_fields.get(part) if model is not None and isinstance(part, str) else None
        model = _model_in(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((model for arg in get_args(annotation) if (model := _model_in(arg)) is not None), None)


def _message(error: Any, written: str | None) -> str:
    """What is wrong with a field's value, the value itself, and the fix (`written`: as the file writes it)."""
    kind, value, context = error["type"], error.get("input"), error.get("ctx", {})
    loc = error["loc"]
    shown = _shown(value, written)
    # The key as the fix writes it (`nodes: 16`), but for a dict key's own error.
    key = f"{loc[-1]}: " if loc and loc[-1] != "[key]" else ""
    if isinstance(value, OversizedInteger):
        return (
            f"is an integer of {value.length} characters; no field takes more than "
            f"{MAX_INTEGER_CHARACTERS}: give the value the field documents"
        )
    if kind == "missing":
        return "is required"
    if value is None:  # `key:` with nothing after it
        expected = f"one of {context['expected']}" if kind == "literal_error" else _EXPECTED.get(kind, "one")
        return f"has no value: give {expected}"
    if kind in ("int_type", "bool_type", "float_type") and isinstance(value, str) and _reads_as(value, kind):
        return f"{shown} is text, because of its quotes, not {_EXPECTED[kind]}: remove the quotes ({key}{value})"
    if kind == "string_type" and isinstance(value, bool | int | float):
        read_as = f"the boolean {str(value).lower()}" if isinstance(value, bool) else "a number"
        return f'{shown} is read as {read_as}, not text: quote it ({key}"{written or value}")'
    if kind in _EXPECTED:
        return f"{shown} is not {_EXPECTED[kind]}"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", context["expected"])
        meant = closest(value, choices) if isinstance(value, str) else None
        hint = f"; did you mean {meant!r}?" if meant else ""
        return f"{shown} is not one of {context['expected']}{hint}"
    if kind == "string_pattern_mismatch":
        words = PATTERN_WORDS.get(context["pattern"])
        if words is None:  # every pattern has its words; the raw pattern is still better than nothing
            return f"{shown} does not match the pattern {context['pattern']}"
        return f"{shown} is not {words[0]}, e.g. {words[1]}"
    if kind == "string_too_long":
        return f"{shown} is {len(value)} characters; at most {context['max_length']}"
    if kind == "string_too_short":
        return "is empty: give a command" if context.get("min_length") == 1 else error["msg"]
    if kind == "finite_number":
        return f"{shown} is not a finite number: give one such as 5000"
    if kind == "greater_than_equal":
        return f"{shown} is too small: the least is {context['ge']}"
    if kind == "less_than_equal":
        return f"{shown} is too large: the most is {context['le']}"
    message: str = error["msg"].removeprefix("Value error, ")
    return message


# What a field of each type takes, as "is not ..." says it.
_EXPECTED = {
    "int_type": "a whole number",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "text",
    "model_type": "a mapping: its fields, each on its own line, indented below it",
    "dict_type": "a mapping: NAME: value, each on its own line, indented below it",
}


def _reads_as(text: str, kind: str) -> bool:
    """Whether `text`, written without quotes, is what a field of `kind` takes."""
    if kind == "int_type":
        return re.fullmatch(r"[-+]?[0-9]+", text.strip()) is not None
    if kind == "float_type":
        return re.fullmatch(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", text.strip()) is not None
    return text.strip().lower() in ("true", "false")


def _shown(value: Any, written: str | None = None) -> str:
    """The value as the message shows it: text in quotes, anything else as the file writes it."""
    text = written if written is not None and not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
