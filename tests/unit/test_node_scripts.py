"""trainrun's Neuron install script: rendered per OS from the shipped .sh files, pinned in one
place, uploaded under its content address. (tests/e2e/test_neuron_install.py runs it.)"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from trainrun.logic.neuron_install import (
    NEURON_VERSIONS,
    SCRIPTS_DIR,
    SETUP_GUIDE_RELEASE,
    ScriptUploadFailed,
    render_script,
    script_key,
    supported_os,
    unsupported_os_reason,
    upload_script,
    venv_address,
    venv_prefix,
)
from trainrun.model.run_file import PCLUSTER_OSES

ROOT = Path(__file__).resolve().parents[2]


def header(script: str) -> dict[str, str]:
    return dict(re.findall(r"^([a-z_]+)='([^']*)'$", script, flags=re.MULTILINE))


@pytest.mark.parametrize("os_name", PCLUSTER_OSES)
def test_every_parallelcluster_os_is_either_served_or_refused_with_a_reason(os_name: str):
    assert (os_name in supported_os()) == (unsupported_os_reason(os_name) is None)


def test_the_os_table_was_checked_against_the_pinned_release():
    # The table of served OSes follows one release's setup guide: a new pin means reading the new guide.
    assert NEURON_VERSIONS["neuron_release"] == SETUP_GUIDE_RELEASE


def test_the_pinned_release_serves_ubuntu_only():
    # Neuron 2.29.0's PyTorch setup guide: Ubuntu 22.04/24.04 and Amazon Linux 2023, the last without PyTorch 2.9.
    assert supported_os() == ["ubuntu2204", "ubuntu2404"]
    assert "PyTorch 2.9 is not yet available on Amazon Linux 2023" in str(unsupported_os_reason("alinux2023"))


@pytest.mark.parametrize("os_name", supported_os())
def test_the_header_pins_every_neuron_version_as_a_quoted_assignment(os_name: str):
    script = render_script(os_name)

    assert script.startswith("#!/bin/bash\n")
    assert header(script).items() >= NEURON_VERSIONS.items()


@pytest.mark.parametrize("os_name", supported_os())
def test_the_script_is_the_os_familys_file_then_the_node_steps(os_name: str):
    script = render_script(os_name)

    family_text = (SCRIPTS_DIR / "neuron-apt.sh").read_text().strip("\n")
    steps = (SCRIPTS_DIR / "node-configured.sh").read_text().strip("\n")
    assert script.endswith(f"{family_text}\n\n{steps}\n")
    assert header(script)["python"] == "python3"


def test_a_script_for_a_stack_reuses_the_environment_at_its_content_address_in_the_config_bucket():
    assignments = header(render_script("ubuntu2204", "stack-config"))

    address = venv_address("ubuntu2204")
    assert re.fullmatch(r"[0-9a-f]{64}", address)
    assert assignments["venv_address"] == address
    assert assignments["venv_store"] == f"s3://stack-config/neuron-venv/{address}/"
    assert venv_prefix("stack-config", "ubuntu2204") == assignments["venv_store"]


def test_a_script_without_a_config_bucket_always_builds_the_environment():
    assert header(render_script("ubuntu2204"))["venv_store"] == ""


def test_the_environments_address_differs_by_os():
    assert venv_address("ubuntu2204") != venv_address("ubuntu2404")


@pytest.mark.parametrize("pin", ["neuronx_cc", "torch_neuronx", "aws_neuronx_runtime_lib"])
def test_a_new_pinned_version_is_a_new_environment_address(pin: str, monkeypatch: pytest.MonkeyPatch):
    before = venv_address("ubuntu2204")

    monkeypatch.setitem(NEURON_VERSIONS, pin, "9.9.9")

    assert venv_address("ubuntu2204") != before


def test_versions_are_written_only_in_the_header():
    # One place: the shipped .sh files name no version of a Neuron package.
    for path in SCRIPTS_DIR.glob("*.sh"):
        for version in NEURON_VERSIONS.values():
            assert version not in path.read_text(), f"{path.name} pins {version} itself"


# The local head node's snapshot of what the Neuron apt repository publishes (its stand-in apt-get
# installs nothing else): manager, package, version, arch, the releases that ship it.
CATALOGUE = ROOT / "examples" / "local-head-node" / "neuron-repository.txt"
PINNED_PACKAGES = ("aws-neuronx-dkms", "aws-neuronx-collectives", "aws-neuronx-runtime-lib", "aws-neuronx-tools")


def published_builds(package: str, release: str) -> list[str]:
    rows = [line.split() for line in CATALOGUE.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [row[2] for row in rows if row[:2] == ["apt", package] and release in row[4].split(",")]


@pytest.mark.parametrize("package", PINNED_PACKAGES)
def test_each_pin_selects_the_one_build_the_pinned_release_publishes(package: str):
    # The script asks for `<version>*`: the published build of the release must start with the pin.
    release = NEURON_VERSIONS["neuron_release"]
    pin = NEURON_VERSIONS[package.replace("-", "_")]

    [build] = published_builds(package, release)

    assert build.startswith(pin)


def test_the_key_is_the_scripts_sha256():
    script = render_script("ubuntu2204")

    digest = hashlib.sha256(script.encode()).hexdigest()
    assert script_key(script) == f"cluster-scripts/{digest}/on-node-configured.sh"
    assert script_key(render_script("ubuntu2404")) != script_key(script)


@pytest.mark.parametrize("os_name", ["alinux2", "alinux2023"])
def test_an_os_without_a_script_is_a_value_error_naming_the_choices(os_name: str):
    with pytest.raises(ValueError, match="one of ubuntu2204, ubuntu2404"):
        render_script(os_name)


def test_uploading_twice_leaves_one_object_with_the_same_bytes(s3: Any, config_bucket: str):
    first = upload_script(s3, config_bucket, "ubuntu2204")
    second = upload_script(s3, config_bucket, "ubuntu2204")

    assert first == second == f"s3://{config_bucket}/{script_key(render_script('ubuntu2204', config_bucket))}"
    objects = s3.list_objects_v2(Bucket=config_bucket, Prefix="cluster-scripts/")["Contents"]
    assert [o["Key"] for o in objects] == [first.removeprefix(f"s3://{config_bucket}/")]
    body = s3.get_object(Bucket=config_bucket, Key=objects[0]["Key"])["Body"].read().decode()
    assert body == render_script("ubuntu2204", config_bucket)


def test_an_upload_the_bucket_refuses_is_a_typed_error(s3: Any):
    with pytest.raises(ScriptUploadFailed, match="no-such-bucket") as failed:
        upload_script(s3, "no-such-bucket", "ubuntu2404")
    assert isinstance(failed.value.__cause__, ClientError)


SHELLCHECK = shutil.which("shellcheck")


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed: `make shellcheck` installs it")
@pytest.mark.parametrize("os_name", supported_os())
def test_the_rendered_script_passes_shellcheck(os_name: str, tmp_path: Path):
    script = tmp_path / "on-node-configured.sh"
    script.write_text(render_script(os_name))

    checked = subprocess.run([str(SHELLCHECK), str(script)], capture_output=True, text=True, check=False)

    assert checked.returncode == 0, checked.stdout
