"""trainrun's Neuron install script (OnNodeConfigured) run for real on the local head node.

The package managers are the head node's stand-ins (examples/local-head-node): they record what
they would install, and refuse what the real ones refuse (a Neuron package before the Neuron
repository is configured, a package or version that repository does not publish:
examples/local-head-node/neuron-repository.txt). The script runs in a namespace of its own whose /etc writes land in
the sandbox. Needs root and Slurm + MUNGE (`make slurm`); skipped with the reason otherwise.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

from trainrun.local import lustre_servers
from trainrun.local.fixture import load_fixture
from trainrun.local.runtime import LocalRuntime
from trainrun.local.slurm_head_node import LocalHeadNode, OnNodeConfiguredFailed
from trainrun.local.summary import summarize
from trainrun.logic.file_system_mount import mount_args, upload_mount_script
from trainrun.logic.neuron_install import (
    NEURON_VERSIONS,
    NODE_CONFIGURED_MARKER,
    SCRIPTS_DIR,
    render_script,
    script_key,
    supported_os,
    upload_script,
    venv_address,
    venv_prefix,
)
from trainrun.model.jobs import DEFAULT_USERS
from trainrun.workflow import State

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE

pytestmark = NEEDS_LOCAL_HEAD_NODE

V = NEURON_VERSIONS
KERNEL = os.uname().release
# Pinned as `<version>*`: the repository's versions add the build's commit to the manifest's.
APT_NEURON = {
    f"linux-headers-{KERNEL}",
    f"aws-neuronx-dkms={V['aws_neuronx_dkms']}*",
    f"aws-neuronx-collectives={V['aws_neuronx_collectives']}*",
    f"aws-neuronx-runtime-lib={V['aws_neuronx_runtime_lib']}*",
    f"aws-neuronx-tools={V['aws_neuronx_tools']}*",
}
# What every node installs from the OS's own repositories: the environment's interpreter and a compiler.
APT_PYTHON = {"python3-venv", "g++"}
PIP_NEURON = [f"neuronx-cc=={V['neuronx_cc']}", f"torch-neuronx=={V['torch_neuronx']}"]


@pytest.fixture(scope="module")
def aws_environment() -> Iterator[dict[str, str]]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_REGION": "us-west-2",
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    server.stop()


@pytest.fixture(scope="module")
def head_node_for(
    tmp_path_factory: pytest.TempPathFactory, aws_environment: dict[str, str]
) -> Iterator[Callable[[str], LocalHeadNode]]:
    """A started head node whose user is the OS's default user (one per user, for the module)."""
    started: dict[str, LocalHeadNode] = {}

    def head_node(os_name: str) -> LocalHeadNode:
        user = DEFAULT_USERS[os_name]
        if user not in started:
            # Short: Slurm's sockets live under the sandbox (108 bytes a Unix socket path).
            sandbox = Path(tmp_path_factory.mktemp("n", numbered=True))
            node = LocalHeadNode(sandbox=sandbox, nodes=["compute-1"], user=user, aws_environment=aws_environment)
            node.start(lambda group, stream, lines: None)
            node.mount_file_system()  # as the node's configuration does after it started
            started[user] = node
        return started[user]

    yield head_node
    for node in started.values():
        node.stop()


def s3_client(environment: dict[str, str]) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=environment["AWS_ENDPOINT_URL"],
        region_name=environment["AWS_REGION"],
        aws_access_key_id=environment["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=environment["AWS_SECRET_ACCESS_KEY"],
    )


def run(head_node: LocalHeadNode, text: str, *args: str) -> tuple[int, str, list[list[str]]]:
    """Run `text` as a node script; its exit code, stderr and the recorded package manager commands."""
    script = head_node.sandbox / "node-script.sh"
    script.write_text(text)
    script.chmod(0o755)
    completed = head_node.run_node_script(script, list(args))
    log = head_node.sandbox / "node-configured" / "packages.log"
    commands = [shlex.split(line) for line in log.read_text().splitlines()] if log.exists() else []
    return completed.returncode, completed.stderr, commands


def installed(commands: list[list[str]]) -> set[str]:
    """The packages of every `apt-get install` recorded, without their options."""
    return {word for argv in commands if argv[1:2] == ["install"] for word in argv[2:] if not word.startswith("-")}


@pytest.mark.parametrize("os_name", supported_os())
def test_a_compute_node_installs_the_pinned_neuron_driver_runtime_and_tools(os_name: str, head_node_for) -> None:
    head_node = head_node_for(os_name)

    code, stderr, commands = run(head_node, render_script(os_name), "ComputeFleet")

    assert code == 0, stderr
    assert installed(commands) == APT_PYTHON | APT_NEURON
    assert not (head_node.sandbox / "home" / DEFAULT_USERS[os_name] / "aws_neuron_venv_pytorch").exists()


@pytest.mark.parametrize("os_name", supported_os())
def test_the_head_node_builds_the_pytorch_neuron_environment_of_the_default_user(os_name: str, head_node_for) -> None:
    head_node = head_node_for(os_name)
    venv = head_node.sandbox / "home" / DEFAULT_USERS[os_name] / "aws_neuron_venv_pytorch"
    (venv / "stand-in-pip.log").unlink(missing_ok=True)

    code, stderr, commands = run(head_node, render_script(os_name), "HeadNode")

    assert code == 0, stderr
    assert installed(commands) == APT_PYTHON
    pip = [shlex.split(line) for line in (venv / "stand-in-pip.log").read_text().splitlines()]
    assert ["pip", "config", "--site", "set", "global.extra-index-url", "https://pip.repos.neuron.amazonaws.com"] in pip
    assert pip[-1] == ["pip", "install", "--extra-index-url", "https://pip.repos.neuron.amazonaws.com", *PIP_NEURON]
    assert (venv / "bin" / "activate").is_file()


def configured_marker(head_node: LocalHeadNode) -> Path:
    """Where the head node's OnNodeConfigured marker is, seen from outside its namespace."""
    marker = head_node.sandbox / "node-state" / Path(NODE_CONFIGURED_MARKER).name
    marker.unlink(missing_ok=True)  # a fresh node: the fixture's head node is shared by tests
    return marker


def test_the_head_node_marks_itself_configured_once_its_environment_is_in_place(head_node_for) -> None:
    # Given a head node whose OnNodeConfigured has not run
    os_name = supported_os()[0]
    head_node = head_node_for(os_name)
    marker = configured_marker(head_node)
    # When it runs
    code, stderr, _ = run(head_node, render_script(os_name), "HeadNode")
    # Then it wrote, last, the marker Prepare head node waits for, naming the environment it put in place
    assert code == 0, stderr
    assert marker.read_text() == venv_address(os_name) + "\n"
    assert not marker.with_name(marker.name + ".tmp").exists()


def test_a_compute_node_writes_no_configured_marker(head_node_for) -> None:
    # Given the local compute nodes run their OnNodeConfigured in the head node's namespace
    os_name = supported_os()[0]
    head_node = head_node_for(os_name)
    marker = configured_marker(head_node)
    # When a compute node's runs
    code, stderr, _ = run(head_node, render_script(os_name), "ComputeFleet")
    # Then it does not mark the head node configured
    assert code == 0, stderr
    assert not marker.exists()


def test_the_apt_repository_is_the_neuron_one_signed_by_its_key_and_stays_in_the_sandbox(head_node_for) -> None:
    head_node = head_node_for("ubuntu2204")

    code, stderr, _ = run(head_node, render_script("ubuntu2204"), "ComputeFleet")

    assert code == 0, stderr
    etc = head_node.sandbox / "node-configured" / "etc"
    assert (etc / "apt" / "sources.list.d" / "neuron.list").read_text() == (
        "deb [signed-by=/etc/apt/keyrings/neuron.gpg] https://apt.repos.neuron.amazonaws.com jammy main\n"
    )
    assert "stand-in key of the Neuron repositories" in (etc / "apt" / "keyrings" / "neuron.gpg").read_text()
    assert not Path("/etc/apt/sources.list.d/neuron.list").exists()


def test_a_neuron_package_before_the_neuron_repository_is_refused_as_apt_does(head_node_for) -> None:
    head_node = head_node_for("ubuntu2204")
    script = f"#!/bin/bash\napt-get install -y aws-neuronx-dkms={V['aws_neuronx_dkms']}\n"

    code, stderr, commands = run(head_node, script)

    assert code == 100
    assert "Unable to locate package aws-neuronx-dkms" in stderr
    assert commands == []


def with_the_neuron_repository(os_name: str, install: str) -> str:
    """A node script that configures the Neuron repository as the rendered one does, then runs `install`."""
    header = render_script(os_name).split("\n\n", 1)[0]
    return f"{header}\n{(SCRIPTS_DIR / 'neuron-apt.sh').read_text()}\nneuron_repository\n{install}\n"


def test_a_neuron_version_without_its_build_suffix_is_not_found_as_apt_says(head_node_for) -> None:
    # Given a node whose Neuron repository is configured
    head_node = head_node_for("ubuntu2204")
    version = V["aws_neuronx_collectives"]
    # When the collectives are asked for at the release manifest's version, without `*`
    script = with_the_neuron_repository("ubuntu2204", f"apt_get install -y aws-neuronx-collectives={version}")
    code, stderr, commands = run(head_node, script)
    # Then apt finds no such version (the repository's is <version>-<commit>), and nothing installs
    assert code == 100
    assert f"E: Version '{version}' for 'aws-neuronx-collectives' was not found" in stderr
    assert installed(commands) == set()


def test_a_neuron_release_the_repository_does_not_publish_is_not_found(head_node_for) -> None:
    # A version prefix no published build starts with: `*` finds only what is there.
    head_node = head_node_for("ubuntu2204")

    script = with_the_neuron_repository("ubuntu2204", "apt_get install -y aws-neuronx-tools=2.99.0.0*")
    code, stderr, _ = run(head_node, script)

    assert code == 100
    assert "E: Version '2.99.0.0*' for 'aws-neuronx-tools' was not found" in stderr


def test_a_neuron_package_the_repository_does_not_publish_is_refused_as_apt_does(head_node_for) -> None:
    head_node = head_node_for("ubuntu2204")

    script = with_the_neuron_repository("ubuntu2204", "apt_get install -y aws-neuronx-runtime")
    code, stderr, _ = run(head_node, script)

    assert code == 100
    assert "E: Unable to locate package aws-neuronx-runtime" in stderr


def test_the_script_refuses_an_unknown_node_kind(head_node_for) -> None:
    code, stderr, commands = run(head_node_for("ubuntu2204"), render_script("ubuntu2204"), "LoginNode")

    assert code == 2
    assert "usage:" in stderr
    assert commands == []


def test_on_node_configured_fetches_the_uploaded_script_from_s3_and_runs_it(
    head_node_for, aws_environment: dict[str, str]
) -> None:
    head_node = head_node_for("ubuntu2204")
    s3 = s3_client(aws_environment)
    s3.create_bucket(Bucket="config", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    uri = upload_script(s3, "config", "ubuntu2204")

    head_node.run_on_node_configured(uri, ["ComputeFleet"])

    log = (head_node.sandbox / "node-configured" / "packages.log").read_text()
    assert f"aws-neuronx-dkms={V['aws_neuronx_dkms']}*" in log


def test_a_failing_on_node_configured_script_is_an_execution_failure(
    head_node_for, aws_environment: dict[str, str]
) -> None:
    head_node = head_node_for("ubuntu2204")
    s3 = s3_client(aws_environment)
    s3.create_bucket(Bucket="broken", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_object(Bucket="broken", Key="fail.sh", Body=b"#!/bin/bash\necho 'no Neuron today' >&2\nexit 3\n")

    with pytest.raises(OnNodeConfiguredFailed) as failed:
        head_node.run_on_node_configured("s3://broken/fail.sh", ["HeadNode"])

    assert failed.value.failure_code == "OnNodeConfiguredExecutionFailure"
    assert "exit code 3" in failed.value.reason
    assert "no Neuron today" in failed.value.reason


def test_a_missing_on_node_configured_script_is_a_download_failure(head_node_for) -> None:
    with pytest.raises(OnNodeConfiguredFailed) as failed:
        head_node_for("ubuntu2204").run_on_node_configured("s3://nowhere-bucket/missing.sh", ["HeadNode"])

    assert failed.value.failure_code == "OnNodeConfiguredDownloadFailure"


def test_the_mount_script_mounts_fsx_only_once_fsx_says_the_file_system_is_available(
    tmp_path_factory: pytest.TempPathFactory, aws_environment: dict[str, str]
) -> None:
    # Given a head node whose /fsx nothing has mounted yet, and the mount script in the config bucket
    node = LocalHeadNode(
        sandbox=Path(tmp_path_factory.mktemp("m")), nodes=["compute-1"], user="ubuntu", aws_environment=aws_environment
    )
    node.start(lambda group, stream, lines: None)
    try:
        s3 = s3_client(aws_environment)
        s3.create_bucket(Bucket="mounts", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        uri = upload_mount_script(s3, "mounts")
        dns_name = "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"
        five_seconds = [*mount_args(dns_name, "abcdefgh", "/fsx")[:3], "5"]
        no_wait = [*five_seconds[:3], "0"]

        def fsx_mounted() -> bool:
            return run(node, "#!/bin/bash\nmountpoint -q /fsx\n")[0] == 0

        # When the file system is still being created: the script retries, then fails with mount's error
        lustre_servers.publish(dns_name, "abcdefgh", available=False)
        with pytest.raises(OnNodeConfiguredFailed) as refused:
            node.run_on_node_configured(uri, five_seconds)
        assert f"could not mount {dns_name}@tcp:/abcdefgh at /fsx in 5s" in refused.value.reason
        assert "Input/output error" in refused.value.reason
        assert not fsx_mounted()
        # And an AVAILABLE file system under another mount name is refused too
        lustre_servers.publish(dns_name, "zzzzzzzz", available=True)
        with pytest.raises(OnNodeConfiguredFailed):
            node.run_on_node_configured(uri, no_wait)
        # Then, once FSx says it is AVAILABLE with that name, the same script mounts it at /fsx (and
        # in /etc/fstab, for a reboot: the node's /etc is the sandbox's overlay, read before the next script)
        lustre_servers.publish(dns_name, "abcdefgh", available=True)
        node.run_on_node_configured(uri, no_wait)
        fstab = (node.sandbox / "node-configured" / "etc" / "fstab").read_text()
        assert f"{dns_name}@tcp:/abcdefgh /fsx lustre defaults,relatime,flock,_netdev 0 0" in fstab
        assert fsx_mounted()
        # And run again (ParallelCluster may), it leaves the mount as it is
        node.run_on_node_configured(uri, no_wait)
        assert fsx_mounted()
    finally:
        lustre_servers.publish(dns_name, "abcdefgh", available=False)
        node.stop()


# --- in a whole local run ------------------------------------------------------------------------


def test_a_run_whose_install_script_fails_ends_with_the_cluster_create_failed() -> None:
    # Given a stack whose NeuronInstallScriptUri names a script that fails
    account = load_fixture(EXAMPLES / "accounts" / "default.yaml")
    parameters = {"NeuronInstallScriptUri": "s3://trainrun-examples/broken-neuron-install.sh"}
    with LocalRuntime(account, parameters=parameters) as runtime:
        runtime.client("s3").put_object(
            Bucket="trainrun-examples",
            Key="broken-neuron-install.sh",
            Body=b"#!/bin/bash\necho 'E: no Neuron' >&2\nexit 1\n",
        )
        # When a run starts
        started = runtime.submit((EXAMPLES / "single-node.yaml").read_bytes(), "runs/broken-neuron.yaml")
        summary = summarize(runtime, started, runtime.wait(started.execution_arn, timeout=240))
    # Then the cluster ends CREATE_FAILED with ParallelCluster's failure code, and the run fails with nothing left
    assert summary.status == "FAILED"
    assert summary.error is not None and "OnNodeConfiguredExecutionFailure" in str(summary.error)
    assert summary.error["error"] == "ClusterCreateFailed"
    # (the head node was prepared meanwhile, beside the cluster's creation; no job ran)
    assert State.COMPILE not in summary.states and State.TRAIN not in summary.states
    assert summary.resources.remaining == []


def test_a_run_installs_the_neuron_sdk_on_its_head_node_from_the_config_bucket() -> None:
    account = load_fixture(EXAMPLES / "accounts" / "default.yaml")
    # Sandboxes kept: a head node's sandbox is otherwise deleted with its cluster at teardown.
    with LocalRuntime(account, keep_sandboxes=True) as runtime:
        started = runtime.submit((EXAMPLES / "single-node.yaml").read_bytes(), "runs/neuron.yaml")
        summary = summarize(runtime, started, runtime.wait(started.execution_arn, timeout=240))
        assert runtime.head_nodes is not None
        [sandbox] = [path for path in runtime.head_nodes.sandboxes.iterdir() if path.is_dir()]
        bucket = runtime.deployed.outputs["ConfigBucketName"]
        keys = [o["Key"] for o in runtime.client("s3").list_objects_v2(Bucket=bucket)["Contents"]]
        pip = (sandbox / "home" / "ubuntu" / "aws_neuron_venv_pytorch" / "stand-in-pip.log").read_text()
        shutil.rmtree(sandbox, ignore_errors=True)
    assert summary.status == "SUCCEEDED", summary.error
    assert script_key(render_script("ubuntu2204", bucket)) in keys
    assert f"torch-neuronx=={V['torch_neuronx']}" in pip


# --- the head node's environment, reused at its content address -----------------------------------

VENV_BUCKET = "venv-config"


def a_fresh_head_node(os_name: str, head_node_for, aws_environment: dict[str, str]) -> tuple[LocalHeadNode, Path]:
    """The OS's head node with no environment in its home yet, and the config bucket in S3: a new cluster's."""
    head_node = head_node_for(os_name)
    venv = head_node.sandbox / "home" / DEFAULT_USERS[os_name] / "aws_neuron_venv_pytorch"
    shutil.rmtree(venv, ignore_errors=True)
    s3 = s3_client(aws_environment)
    if VENV_BUCKET not in {bucket["Name"] for bucket in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=VENV_BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    return head_node, venv


def saved_archives(aws_environment: dict[str, str], os_name: str) -> list[str]:
    prefix = venv_prefix(VENV_BUCKET, os_name).removeprefix(f"s3://{VENV_BUCKET}/")
    listed = s3_client(aws_environment).list_objects_v2(Bucket=VENV_BUCKET, Prefix=prefix)
    return [entry["Key"] for entry in listed.get("Contents", [])]


def pip_installs(venv: Path) -> list[list[str]]:
    lines = (venv / "stand-in-pip.log").read_text().splitlines()
    return [shlex.split(line) for line in lines if line.startswith("pip install --extra-index-url")]


def test_the_first_head_node_saves_the_environment_it_built_at_its_content_address(
    head_node_for, aws_environment: dict[str, str]
) -> None:
    # Given a stack whose config bucket holds no environment for ubuntu2404
    head_node, venv = a_fresh_head_node("ubuntu2404", head_node_for, aws_environment)
    for key in saved_archives(aws_environment, "ubuntu2404"):
        s3_client(aws_environment).delete_object(Bucket=VENV_BUCKET, Key=key)
    # When its head node is configured
    code, stderr, _ = run(head_node, render_script("ubuntu2404", VENV_BUCKET), "HeadNode")
    # Then it built the environment with pip, and saved it under the address, named for its Python
    assert code == 0, stderr
    index = "https://pip.repos.neuron.amazonaws.com"
    assert pip_installs(venv) == [["pip", "install", "--extra-index-url", index, *PIP_NEURON]]
    [key] = saved_archives(aws_environment, "ubuntu2404")
    name = re.escape(f"neuron-venv/{venv_address('ubuntu2404')}/aws_neuron_venv_pytorch-python")
    assert re.fullmatch(name + r"3\.[0-9]+\.[0-9]+\.tar", key)
    assert (venv / ".trainrun-venv-address").read_text() == venv_address("ubuntu2404") + "\n"


def test_a_later_head_node_reuses_the_saved_environment_instead_of_building_it(
    head_node_for, aws_environment: dict[str, str]
) -> None:
    # Given a stack whose first head node on ubuntu2204 built and saved the environment
    head_node, venv = a_fresh_head_node("ubuntu2204", head_node_for, aws_environment)
    script = render_script("ubuntu2204", VENV_BUCKET)
    first, stderr, _ = run(head_node, script, "HeadNode")
    assert first == 0, stderr
    shutil.rmtree(venv)
    # When the next cluster's head node is configured
    code, stderr, commands = run(head_node, script, "HeadNode")
    # Then its environment is the saved one, unpacked where it was built, owned by the default user:
    # the one pip install in its log is the first head node's
    assert code == 0, stderr
    assert len(pip_installs(venv)) == 1
    assert (venv / "bin" / "activate").is_file()
    assert (venv / ".trainrun-venv-address").read_text() == venv_address("ubuntu2204") + "\n"
    assert installed(commands) == APT_PYTHON
    assert not (venv.parent / "aws_neuron_venv_pytorch.restoring").exists()


def test_an_archive_at_the_address_that_is_another_environment_is_rebuilt_not_used(
    head_node_for, aws_environment: dict[str, str], tmp_path: Path
) -> None:
    # Given an archive at ubuntu2204's address whose environment says it is another address's
    head_node, venv = a_fresh_head_node("ubuntu2204", head_node_for, aws_environment)
    script = render_script("ubuntu2204", VENV_BUCKET)
    assert run(head_node, script, "HeadNode")[0] == 0
    [key] = saved_archives(aws_environment, "ubuntu2204")
    (venv / ".trainrun-venv-address").write_text("0" * 64 + "\n")
    (venv / "stand-in-pip.log").write_text("")
    archive = tmp_path / "other.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(venv, arcname=venv.name)
    s3_client(aws_environment).upload_file(str(archive), VENV_BUCKET, key)
    shutil.rmtree(venv)
    # When a head node is configured
    code, stderr, _ = run(head_node, script, "HeadNode")
    # Then it built the environment itself, and saved that one over the wrong one
    assert code == 0, stderr
    assert len(pip_installs(venv)) == 1
    assert (venv / ".trainrun-venv-address").read_text() == venv_address("ubuntu2204") + "\n"
    body = s3_client(aws_environment).get_object(Bucket=VENV_BUCKET, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        saved = tar.extractfile("aws_neuron_venv_pytorch/.trainrun-venv-address")
        assert saved is not None and saved.read().decode() == venv_address("ubuntu2204") + "\n"


def test_an_archive_that_does_not_unpack_is_rebuilt_not_used(head_node_for, aws_environment: dict[str, str]) -> None:
    # Given a truncated archive at ubuntu2204's address
    head_node, venv = a_fresh_head_node("ubuntu2204", head_node_for, aws_environment)
    script = render_script("ubuntu2204", VENV_BUCKET)
    assert run(head_node, script, "HeadNode")[0] == 0
    [key] = saved_archives(aws_environment, "ubuntu2204")
    s3_client(aws_environment).put_object(Bucket=VENV_BUCKET, Key=key, Body=b"not a tar archive")
    shutil.rmtree(venv)
    # When a head node is configured
    code, stderr, _ = run(head_node, script, "HeadNode")
    # Then it built the environment with pip
    assert code == 0, stderr
    assert len(pip_installs(venv)) == 1
    assert (venv / "bin" / "activate").is_file()
