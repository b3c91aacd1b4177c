"""The head-node scripts: valid shell, every run-file value passed through exactly, Slurm answers parsed.

Execution tests run the rendered scripts for real (sh, then bash under a stub `runuser`), with
stub commands on PATH that record their argv (git, aws, tar, chown, runuser, bash, sbatch,
squeue, sacct, scontrol, srun) and a stub CloudWatch agent ctl. The scripts use absolute
/fsx and /opt/aws paths, so each runs in its own mount namespace (`unshare --mount`) with a
temporary directory bind-mounted on /fsx and another on /opt; nothing on this machine's real
/fsx or /opt is touched. Without the privilege to do that the execution tests are skipped.
The stubs never run the shell fields (setup, compile, train): they only record them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.unit.test_runfile_properties import (
    SHELL_FORBIDDEN_CHARACTERS,
    env_names,
    env_values,
    fsx_paths,
    git_refs,
    git_urls,
    run_documents,
    s3_archives,
    s3_uris,
    workdirs,
)
from trainrun.logic import head_node_scripts
from trainrun.logic.head_node_scripts import (
    CLOUDWATCH_AGENT_CTL,
    DownNode,
    HeadNodeOutputInvalid,
    JobState,
    QueueState,
    end_watcher_script,
    export_checkpoints_script,
    job_commands,
    node_states_script,
    parse_checkpoint_export,
    parse_job_state,
    parse_node_states,
    parse_submitted,
    prepare_script,
    status_script,
    submit_script,
)
from trainrun.logic.job_log import EndEvent, parse_line
from trainrun.logic.neuron_install import NODE_CONFIGURED_MARKER, supported_os
from trainrun.model.end_marker import end_marker, is_authentic
from trainrun.model.jobs import DEFAULT_USERS, RunPaths, log_stream_name, slurm_job_name
from trainrun.model.run_file import RunSpec

LOG_GROUP = "/trainrun/test/jobs"
REGION = "us-west-2"
SBATCH_ID = 4242
END_KEY = "0f" * 32
CONFIG_BUCKET = "trainrun-config-test"


def budget(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


# --- specs ----------------------------------------------------------------------------------------

# Shell fields: any text but the control characters the run file refuses (tab and newline pass).
commands = st.text(
    st.characters(codec="utf-8", exclude_characters=SHELL_FORBIDDEN_CHARACTERS), min_size=1, max_size=120
)
run_ids = st.from_regex(r"[a-z][a-z0-9-]{0,30}", fullmatch=True)
# Names whose export would change how the test harness itself runs (a run may set them: that is its choice).
_HARNESS_NAMES = {"PATH", "HOME", "PWD", "OLDPWD", "CDPATH", "ENV", "POSIXLY_CORRECT", "GLOBIGNORE", "TMOUT", "TMPDIR"}
_HARNESS_PREFIXES = ("STUB_", "LD_", "BASH", "SLURM_", "LC_", "LANG")
harmless_env_names = env_names.filter(lambda n: n not in _HARNESS_NAMES and not n.startswith(_HARNESS_PREFIXES))
dataset_sources = st.one_of(s3_uris, s3_archives, s3_uris.map(lambda uri: uri.rstrip("/") + "/"))


def make_spec(workload: dict[str, Any], *, nodes: int = 16, os_name: str = "ubuntu2204") -> RunSpec:
    return RunSpec.model_validate(
        {
            "name": "bert",
            "capacity": {"reservation_id": "cr-0123456789abcdef0", "instance_type": "trn1.32xlarge", "nodes": nodes},
            "cluster": {"os": os_name},
            "workload": workload,
        }
    )


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        source: dict[str, Any] = {"s3": draw(s3_archives)}
    else:
        source = {"git": draw(git_urls)}
        ref = draw(st.one_of(st.none(), git_refs, st.from_regex(r"[0-9a-f]{7,40}", fullmatch=True)))
        if ref is not None:
            source["ref"] = ref
    workload: dict[str, Any] = {
        "source": source,
        "workdir": draw(workdirs),
        "train": draw(commands),
        "env": draw(st.dictionaries(harmless_env_names, env_values, max_size=4)),
    }
    for name, strategy in {
        "setup": commands,
        "compile": commands,
        "dataset": st.fixed_dictionaries({"source": dataset_sources, "path": fsx_paths}),
    }.items():
        if draw(st.booleans()):
            workload[name] = draw(strategy)
    return workload


specs = st.builds(
    lambda workload, nodes, os_name: make_spec(workload, nodes=nodes, os_name=os_name),
    workloads(),
    st.integers(1, 128),
    st.sampled_from(supported_os()),
)

BERT = {
    "source": {"git": "https://github.com/aws-neuron/aws-neuron-samples.git"},
    "workdir": "torch-neuronx/training/dp_bert_hf_pretrain",
    "setup": "python3 -m pip install -r requirements.txt",
    "dataset": {
        "source": "s3://neuron-s3/training_datasets/bert_pretrain_wikicorpus_tokenized_hdf5/seqlen128.tar",
        "path": "/fsx/examples_datasets/",
    },
    "compile": "neuron_parallel_compile ./run_dp_bert_large_hf_pretrain_bf16_s128_lamb.sh",
    "train": "./run_dp_bert_large_hf_pretrain_bf16_s128_lamb.sh",
    "env": {"NEURON_CC_FLAGS": "--model-type transformer", "QUOTE": 'it\'s $HOME `id` "x"'},
}


def bert(**changes: Any) -> RunSpec:
    return make_spec({**BERT, **changes})


# --- the sandbox: stubs on PATH, /fsx and /opt bind-mounted in a private mount namespace ---------

RECORD = r"""#!/bin/bash
set -u
name=${0##*/}
printf '%s\0' "$#" "$name" "$PWD" "$@" >>"$STUB_CALLS"
if [ "${STUB_FAIL:-}" = "$name" ]; then
  echo "$name: simulated failure" >&2
  exit 7
fi
"""

STUBS = {
    "runuser": r"""
# runuser -u USER -- COMMAND...: run COMMAND as this user (its environment recorded).
if [ "$1" = -u ] && [ "$3" = -- ]; then
  env -0 >"$STUB_ENV_DIR/runuser.env"
  shift 3
  exec "$@"
fi
# runuser -l USER -c COMMAND: run COMMAND as this user, in a login-like HOME.
[ "$1" = -l ] && [ "$3" = -c ] || { echo "runuser stub: unexpected arguments" >&2; exit 2; }
export HOME=$STUB_HOME
cd "$HOME"
exec /bin/bash -c "$4"
""",
    "bash": r"""
# The scripts' own bash (bash -s) runs; a shell field (bash -lc TEXT) is only recorded.
if [ "$1" = -s ]; then exec /bin/bash "$@"; fi
env -0 >"$STUB_ENV_DIR/bash.env"
exit "${STUB_SETUP_EXIT:-0}"
""",
    "git": r"""
case "$1" in
  clone) dir=${@: -1}; mkdir -p "$dir/.git" "$dir/$STUB_WORKDIR" ;;
  -C) if [ "$3" = rev-parse ]; then echo 0123456789abcdef0123456789abcdef01234567; fi ;;
esac
""",
    "aws": r"""
# cp --recursive to a directory: the checkpoints under the prefix (none with STUB_S3_EMPTY).
if [ "$1 $2 $3" = "s3 cp --recursive" ]; then
  target=${@: -1}
  if [ "${target#s3://}" = "$target" ]; then
    mkdir -p "$target"
    [ -n "${STUB_S3_EMPTY:-}" ] || echo '{"step": 20}' >"$target/step-20.json"
  else
    # To S3: a job still running writes one more file meanwhile (STUB_S3_WRITTEN_DURING_COPY);
    # then an "upload: <file> to <URL>" line per file copied, as the CLI prints them.
    source=${@: -2:1}
    [ -z "${STUB_S3_WRITTEN_DURING_COPY:-}" ] || echo '{}' >"$source/$STUB_S3_WRITTEN_DURING_COPY"
    find "$source" -type f | while read -r file; do echo "upload: $file to $target${file#"$source"/}"; done
  fi
elif [ "$1 $2" = "s3 cp" ] && [ "$4" != - ]; then sleep "${STUB_S3_COPY_SECONDS:-0}"; touch "$4"; fi
""",
    "tar": r"""
# Extracting the workload from stdin: make the workdir it would contain.
if [ "$2" = - ]; then cat >/dev/null; mkdir -p "$4/$STUB_WORKDIR"; fi
""",
    "chown": "",
    # The end watcher is started in the background: here it is only recorded.
    "setsid": "",
    "sbatch": r"""
for arg; do case "$arg" in --job-name=*) job_name=${arg#--job-name=} ;; esac; done
printf '%s %s\n' "$job_name" "$STUB_SBATCH_ID" >>"$STUB_QUEUE"
printf '%s;cluster\n' "$STUB_SBATCH_ID"
""",
    "squeue": r"""
for arg; do case "$arg" in --name=*) job_name=${arg#--name=} ;; esac; done
touch "$STUB_QUEUE"
while read -r queued id; do [ "$queued" = "$job_name" ] && echo "$id"; done <"$STUB_QUEUE"
exit 0
""",
    "sacct": r"""
if [ "${STUB_SACCT:-}" = disabled ]; then
  echo "sacct: error: Slurm accounting storage is disabled" >&2
  exit 1
fi
if [ -f "$STUB_DIR/sacct.out" ]; then cat "$STUB_DIR/sacct.out"; fi
""",
    "scontrol": r"""
if [ -f "$STUB_DIR/scontrol.out" ]; then cat "$STUB_DIR/scontrol.out"; exit 0; fi
echo "slurm_load_jobs error: Invalid job id specified" >&2
exit 1
""",
    "sinfo": r"""
# By partition (--format='%R %a'): sinfo-partitions.out; by node: sinfo.out.
case "$*" in *%R*) out=sinfo-partitions.out ;; *) out=sinfo.out ;; esac
if [ -f "$STUB_DIR/$out" ]; then cat "$STUB_DIR/$out"; fi
""",
    "srun": r"""
env -0 >"$STUB_ENV_DIR/srun.env"
exit "${STUB_SRUN_EXIT:-0}"
""",
}

# /fsx, /opt and root's node state (where the head node's OnNodeConfigured writes its marker) are ours.
NODE_STATE_DIR = posixpath.dirname(NODE_CONFIGURED_MARKER)
NAMESPACE = (
    f'mount --bind "$1" /fsx && mount --bind "$2" /opt && mount --bind "$3" {NODE_STATE_DIR} && shift 3 && exec "$@"'
)


@dataclass
class Call:
    name: str
    cwd: str
    argv: list[str]


@dataclass
class Sandbox:
    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def fsx(self) -> Path:
        return self.root / "fsx"

    @property
    def opt(self) -> Path:
        return self.root / "opt"

    def on_fsx(self, path: str) -> Path:
        """Where an absolute /fsx path of the scripts is, seen from outside the namespace."""
        assert path == "/fsx" or path.startswith("/fsx/")
        return self.fsx / path.removeprefix("/fsx").lstrip("/")

    def install_cloudwatch_agent(self) -> None:
        ctl = self.opt / CLOUDWATCH_AGENT_CTL.removeprefix("/opt/")
        ctl.parent.mkdir(parents=True, exist_ok=True)
        ctl.write_text(RECORD)
        ctl.chmod(0o755)

    def write(self, name: str, text: str) -> None:
        (self.root / "stubs" / name).write_text(text)

    def run(self, script: str, *, shell: str = "sh", **env: str) -> subprocess.CompletedProcess[str]:
        """Run a script as SSM would (`sh script`), in the namespace where /fsx and /opt are ours."""
        path = self.root / "script.sh"
        path.write_text(script)
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", NAMESPACE, "ns"]
        argv += [str(self.fsx), str(self.opt), str(self.root / "node-state"), shell, str(path)]
        return subprocess.run(argv, env={**self.env, **env}, capture_output=True, text=True, timeout=60, check=False)

    def calls(self, name: str | None = None) -> list[Call]:
        assert self.root.exists(), "the sandbox is gone: look at its calls inside the `with` block"
        path = Path(self.env["STUB_CALLS"])
        if not path.exists():
            return []
        fields = path.read_bytes().split(b"\0")[:-1]
        found, i = [], 0
        while i < len(fields):
            count = int(fields[i])
            words = [f.decode("utf-8", "surrogateescape") for f in fields[i + 1 : i + 3 + count]]
            found.append(Call(name=words[0], cwd=words[1], argv=words[2:]))
            i += 3 + count
        return [c for c in found if name is None or c.name == name]

    def argvs(self, name: str) -> list[list[str]]:
        return [c.argv for c in self.calls(name)]

    def recorded_env(self, name: str) -> dict[str, str]:
        data = (self.root / "env" / f"{name}.env").read_bytes()
        pairs = [item.decode("utf-8", "surrogateescape").partition("=") for item in data.split(b"\0") if item]
        return {key: value for key, _, value in pairs}


@contextlib.contextmanager
def sandbox(*, workdir: str = ".", with_agent: bool = True) -> Iterator[Sandbox]:
    with tempfile.TemporaryDirectory(prefix="trainrun-head-node-") as tmp:
        root = Path(tmp)
        for sub in ("bin", "stubs", "env", "home", "fsx", "opt", "node-state"):
            (root / sub).mkdir()
        # A configured head node: its OnNodeConfigured has finished.
        (root / "node-state" / posixpath.basename(NODE_CONFIGURED_MARKER)).write_text("configured\n")
        for name, body in STUBS.items():
            stub = root / "bin" / name
            stub.write_text(RECORD + body)
            stub.chmod(0o755)
        box = Sandbox(
            root,
            env={
                "PATH": f"{root / 'bin'}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
                "LANG": "C.UTF-8",
                "HOME": str(root / "home"),
                "STUB_CALLS": str(root / "calls"),
                "STUB_DIR": str(root / "stubs"),
                "STUB_ENV_DIR": str(root / "env"),
                "STUB_HOME": str(root / "home"),
                "STUB_QUEUE": str(root / "queue"),
                "STUB_SBATCH_ID": str(SBATCH_ID),
                "STUB_WORKDIR": workdir,
            },
        )
        if with_agent:
            box.install_cloudwatch_agent()
        yield box


def _namespace_problem() -> str | None:
    """Why the execution tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "bind-mounting a directory on /fsx and /opt in a private mount namespace needs root"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    if not os.path.isdir("/opt"):
        return "/opt does not exist to bind-mount a stub CloudWatch agent on"
    try:
        os.makedirs("/fsx", exist_ok=True)
        os.makedirs(NODE_STATE_DIR, exist_ok=True)
    except OSError as exc:
        return f"cannot create /fsx or {NODE_STATE_DIR} as a mount point: {exc}"
    with tempfile.TemporaryDirectory() as tmp:
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", NAMESPACE, "ns", tmp, tmp, tmp, "true"],
            capture_output=True,
            text=True,
            check=False,
        )
    if probe.returncode != 0:
        return f"unshare --mount is not permitted here: {probe.stderr.strip()}"
    return None


NAMESPACE_PROBLEM = _namespace_problem()
needs_namespace = pytest.mark.skipif(NAMESPACE_PROBLEM is not None, reason=f"execution tests: {NAMESPACE_PROBLEM}")


def heredoc_bodies(script: str) -> list[str]:
    return [m.group(2) for m in re.finditer(r"<<'(TRAINRUN_EOF\w*)'\n(.*?)\n\1\n", script, re.DOTALL)]


def assert_valid_shell(script: str) -> None:
    for shell in ("sh", "bash"):  # SSM runs the script with sh (dash here)
        checked = subprocess.run([shell, "-n"], input=script, capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stderr
    bodies = heredoc_bodies(script)
    assert bodies, "the script runs nothing in bash"
    for body in bodies:
        checked = subprocess.run(["bash", "-n"], input=body, capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stderr


def workdir_path(spec: RunSpec, run_id: str) -> str:
    return posixpath.normpath(posixpath.join(RunPaths(run_id=run_id).workload_dir, spec.workload.workdir))


# --- every script is valid shell ----------------------------------------------------------------

EXAMPLES = {
    "git default branch": bert(),
    "git branch": bert(source={"git": "git@github.com:org/repo.git", "ref": "release/2.x"}),
    "git commit": bert(source={"git": "https://example.com/r.git", "ref": "0123abcd"}),
    "s3 tgz, no setup, dataset sync": bert(
        source={"s3": "s3://bucket/w.tgz"}, setup=None, dataset={"source": "s3://bkt/data/", "path": "/fsx"}
    ),
    "s3 tar, no dataset, no compile": bert(source={"s3": "s3://bucket/w.tar"}, dataset=None, compile=None),
    "dataset object, not an archive": bert(dataset={"source": "s3://bkt/data/x.h5", "path": "/fsx/d"}),
    "heredoc delimiter in a command": bert(train="echo a\nTRAINRUN_EOF\nTRAINRUN_EOF_1\necho b"),
}


@pytest.mark.parametrize("spec", EXAMPLES.values(), ids=EXAMPLES.keys())
def test_every_script_is_valid_sh_and_bash(spec: RunSpec):
    assert_valid_shell(prepare_script(spec, "run-1", jobs_log_group=LOG_GROUP, region=REGION))
    for job in ("compile", "train") if spec.workload.compile else ("train",):
        assert_valid_shell(submit_script(spec, "run-1", job, end_key=END_KEY, config_bucket=CONFIG_BUCKET))
        checked = subprocess.run(
            ["bash", "-n"],
            input=head_node_scripts.wrapper_script(spec, "run-1", job, config_bucket=CONFIG_BUCKET),
            text=True,
            capture_output=True,
            check=False,
        )
        assert checked.returncode == 0
    assert_valid_shell(status_script(123, "r", "train"))


@budget(60)
@given(run_documents(), run_ids)
def test_scripts_for_any_valid_run_file_are_valid_shell(document: dict[str, Any], run_id: str):
    workload = document["workload"]
    assume(not any("\x00" in (workload.get(name) or "") for name in ("setup", "compile", "train")))
    spec = RunSpec.model_validate(document)
    assert_valid_shell(prepare_script(spec, run_id, jobs_log_group=LOG_GROUP, region=REGION))
    assert_valid_shell(submit_script(spec, run_id, "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET))


def test_the_heredoc_delimiter_is_no_line_of_the_body():
    spec = bert(train="TRAINRUN_EOF\nTRAINRUN_EOF_1", setup="TRAINRUN_EOF_2")
    for script in (
        submit_script(spec, "r", "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET),
        prepare_script(spec, "r", jobs_log_group="g", region=REGION),
    ):
        delimiter = re.search(r"<<'(TRAINRUN_EOF\w*)'", script)
        assert delimiter is not None
        assert script.split("\n").count(delimiter.group(1)) == 1


def test_values_are_checked_before_rendering():
    with pytest.raises(ValueError, match="run id"):
        prepare_script(bert(), "Run; rm -rf /", jobs_log_group=LOG_GROUP, region=REGION)
    with pytest.raises(ValueError, match="run id"):
        submit_script(bert(), "../x", "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET)
    with pytest.raises(ValueError, match="job kind"):
        submit_script(bert(), "r", "eval", end_key=END_KEY, config_bucket=CONFIG_BUCKET)
    with pytest.raises(ValueError, match=r"workload\.compile"):
        submit_script(bert(compile=None), "r", "compile", end_key=END_KEY, config_bucket=CONFIG_BUCKET)
    # The run file model refuses a NUL; the script builder refuses it again (model_copy skips validation)
    spec = bert()
    with_nul = spec.model_copy(update={"workload": spec.workload.model_copy(update={"train": "a\x00b"})})
    with pytest.raises(ValueError, match=r"workload\.train contains a NUL"):
        submit_script(with_nul, "r", "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET)
    with pytest.raises(ValueError, match="Slurm job id"):
        status_script(0, "r", "train")
    with pytest.raises(ValueError, match="Slurm job id"):
        status_script(True, "r", "train")


# --- Prepare head node --------------------------------------------------------------------------


def expected_fetch(spec: RunSpec, run_id: str) -> list[tuple[str, list[str]]]:
    """The fetch commands of a first prepare, with their exact argv."""
    paths = RunPaths(run_id=run_id)
    partial = paths.workload_dir + ".partial"
    source = spec.workload.source
    if source.s3 is not None:
        flag = "-xf" if source.s3.endswith(".tar") else "-xzf"
        return [("aws", ["s3", "cp", source.s3, "-"]), ("tar", [flag, "-", "-C", partial])]
    ref = source.ref
    assert source.git is not None
    clone = ["clone", "--", source.git]
    if ref is not None and re.fullmatch(r"[0-9a-f]{7,40}", ref) is None:
        clone = ["clone", "--branch", ref, "--", source.git]
    calls: list[tuple[str, list[str]]] = [("git", [*clone, partial])]
    if ref is not None:
        calls += [
            ("git", ["-C", partial, "rev-parse", "--verify", "--quiet", f"refs/remotes/origin/{ref}^{{commit}}"]),
            ("git", ["-C", partial, "checkout", "--quiet", "--detach", "0123456789abcdef0123456789abcdef01234567"]),
        ]
    return calls


def expected_dataset(spec: RunSpec) -> list[tuple[str, list[str]]]:
    dataset = spec.workload.dataset
    if dataset is None:
        return []
    directory = dataset.path.rstrip("/") or "/"
    key = dataset.source.removeprefix("s3://").partition("/")[2]
    if not key or dataset.source.endswith("/"):
        return [("aws", ["s3", "sync", dataset.source, directory])]
    target = posixpath.join(directory, posixpath.basename(key))
    calls = [("aws", ["s3", "cp", dataset.source, target])]
    if key.endswith((".tar", ".tar.gz", ".tgz")):
        calls.append(("tar", ["-xf" if key.endswith(".tar") else "-xzf", target, "-C", directory]))
    return calls


def work_calls(box: Sandbox) -> list[tuple[str, list[str]]]:
    return [(c.name, c.argv) for c in box.calls() if c.name in ("git", "aws", "tar")]


@needs_namespace
@budget(25)
@given(specs, run_ids)
def test_prepare_passes_every_value_through_exactly(spec: RunSpec, run_id: str):
    paths = RunPaths(run_id=run_id)
    user = DEFAULT_USERS[spec.cluster.os]
    script = prepare_script(spec, run_id, jobs_log_group=LOG_GROUP, region=REGION)
    with sandbox(workdir=spec.workload.workdir) as box:
        done = box.run(script)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == f"TRAINRUN-PREPARED run={run_id}"

        # As root: the CloudWatch agent ships both job output files to the jobs log group.
        config_path = f"/opt/aws/amazon-cloudwatch-agent/etc/trainrun-{run_id}.json"
        assert box.argvs("amazon-cloudwatch-agent-ctl") == [
            ["-a", "append-config", "-m", "ec2", "-s", "-c", f"file:{config_path}"]
        ]
        config = json.loads((box.opt / config_path.removeprefix("/opt/")).read_text())
        assert config["logs"]["logs_collected"]["files"]["collect_list"] == [
            {
                "file_path": paths.output_file(job),
                "log_group_name": LOG_GROUP,
                "log_stream_name": log_stream_name(run_id, job),
            }
            for job in ("compile", "train")
        ]
        # The run's directories belong to the default user; then the work runs as that user.
        assert ["--", f"{user}:", paths.run_dir] in box.argvs("chown")
        assert box.argvs("runuser") == [["-l", user, "-c", "bash -s"]]

        # The workload, the setup (from the workdir, with the run's env) and the dataset.
        # (the two sides of `aws s3 cp ... - | tar -x` start in either order)
        assert sorted(map(repr, work_calls(box))) == sorted(
            map(repr, expected_fetch(spec, run_id) + expected_dataset(spec))
        )
        setups = [c for c in box.calls("bash") if c.argv[:1] == ["-lc"]]
        if spec.workload.setup is None:
            assert setups == []
        else:
            assert [c.argv for c in setups] == [["-lc", spec.workload.setup]]
            assert setups[0].cwd == workdir_path(spec, run_id)
            env = box.recorded_env("bash")
            assert {name: env.get(name) for name in spec.workload.env} == spec.workload.env
            assert env["AWS_DEFAULT_REGION"] == REGION
        assert box.on_fsx(paths.workload_dir).is_dir()
        if spec.workload.dataset is not None:
            directory = spec.workload.dataset.path.rstrip("/") or "/"
            digest = hashlib.sha256(spec.workload.dataset.source.encode()).hexdigest()
            assert box.on_fsx(posixpath.join(directory, f".trainrun-staged-{digest}")).exists()

        # A second prepare fetches instead of cloning, and stages nothing again.
        before = len(box.calls())
        again = box.run(script)
        assert again.returncode == 0, again.stderr
        repeated = [(c.name, c.argv) for c in box.calls()[before:] if c.name in ("git", "aws", "tar")]
        if spec.workload.source.git is None:
            assert repeated == []
        else:
            assert repeated[0] == ("git", ["-C", paths.workload_dir, "fetch", "--quiet", "--tags", "--force", "origin"])
            assert all(name == "git" and "clone" not in argv for name, argv in repeated)


@needs_namespace
def test_prepare_fails_clearly_without_the_cloudwatch_agent():
    with sandbox(with_agent=False) as box:
        done = box.run(prepare_script(bert(), "r", jobs_log_group=LOG_GROUP, region=REGION))
        assert done.returncode != 0
        assert "TRAINRUN-ERROR cloudwatch-agent-missing" in done.stderr
        assert CLOUDWATCH_AGENT_CTL in done.stderr
        assert box.calls("runuser") == [] and box.calls("git") == [] and box.calls("chown") == []


@needs_namespace
def test_a_failing_step_stops_prepare_and_shows_the_end_of_its_log():
    with sandbox(workdir=BERT["workdir"]) as box:
        done = box.run(prepare_script(bert(), "r", jobs_log_group=LOG_GROUP, region=REGION), STUB_FAIL="git")
        log = box.on_fsx("/fsx/trainrun/r/logs/prepare.log").read_text()
        assert done.returncode == 7
        assert "TRAINRUN-ERROR step fetch-workload failed with exit code 7" in done.stderr
        assert "git: simulated failure" in done.stderr and "git: simulated failure" in log
        assert "TRAINRUN-PREPARED" not in done.stdout
        assert box.argvs("bash") == [["-s"]]  # setup never ran


@needs_namespace
def test_a_failing_setup_fails_prepare_with_its_exit_code_and_stops_the_dataset_staged_beside_it():
    with sandbox(workdir=BERT["workdir"]) as box:
        script = prepare_script(bert(), "r", jobs_log_group=LOG_GROUP, region=REGION)
        # Given a dataset whose copy takes a while (it starts beside the workload's fetch and setup)
        done = box.run(script, STUB_SETUP_EXIT="5", STUB_S3_COPY_SECONDS="31.5")
        assert done.returncode == 5
        assert "TRAINRUN-ERROR step setup failed with exit code 5" in done.stderr
        # Then the copy had started, and was stopped (nothing of it still runs): never unpacked, never marked staged
        assert sorted(name for name, _ in work_calls(box)) == ["aws", "git"]
        still_copying = subprocess.run(["pgrep", "-f", "sleep 31.5"], capture_output=True, text=True, check=False)
        assert still_copying.stdout == ""
        assert not list(box.on_fsx("/fsx/examples_datasets").glob(".trainrun-staged*"))


@needs_namespace
def test_a_dataset_that_fails_to_stage_fails_prepare_with_its_own_logs_tail():
    with sandbox(workdir=BERT["workdir"]) as box:
        done = box.run(prepare_script(bert(), "r", jobs_log_group=LOG_GROUP, region=REGION), STUB_FAIL="aws")
        assert done.returncode == 7
        assert "TRAINRUN-ERROR step dataset failed with exit code 7; the last lines of " in done.stderr
        assert "prepare-dataset.log" in done.stderr and "aws: simulated failure" in done.stderr
        assert "TRAINRUN-PREPARED" not in done.stdout


@needs_namespace
def test_a_missing_workdir_is_named():
    with sandbox(workdir="elsewhere") as box:
        done = box.run(prepare_script(bert(), "r", jobs_log_group=LOG_GROUP, region=REGION))
    assert done.returncode == 1
    assert f"workload.workdir: {BERT['workdir']} is not a directory of the workload" in done.stderr


@needs_namespace
def test_the_seed_dataset_is_downloaded_extracted_and_removed_once():
    with sandbox(workdir=BERT["workdir"]) as box:
        script = prepare_script(bert(), "r", jobs_log_group=LOG_GROUP, region=REGION)
        assert box.run(script).returncode == 0
        assert box.run(script).returncode == 0
        archive = "/fsx/examples_datasets/seqlen128.tar"
        assert [argv for name, argv in work_calls(box) if name != "git"] == [
            ["s3", "cp", BERT["dataset"]["source"], archive],
            ["-xf", archive, "-C", "/fsx/examples_datasets"],
        ]
        assert not box.on_fsx(archive).exists()


@needs_namespace
def test_a_shell_field_holding_the_heredoc_delimiter_stays_one_argument():
    tricky = "echo a\nTRAINRUN_EOF\nTRAINRUN_EOF_1\nrm -rf / ; exit 0\n'\"$(id)\"'"
    spec = bert(setup=tricky, train=tricky)
    with sandbox(workdir=BERT["workdir"]) as box:
        done = box.run(prepare_script(spec, "r", jobs_log_group=LOG_GROUP, region=REGION))
        assert done.returncode == 0, done.stderr
        assert [argv for argv in box.argvs("bash") if argv[0] == "-lc"] == [["-lc", tricky]]
        assert submitted(box, submit_script(spec, "r", "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET)) == (
            SBATCH_ID,
            False,
        )
        ran = box.run("exec /bin/bash /fsx/trainrun/r/train.sbatch.sh\n", SLURM_JOB_ID="1")
        assert ran.returncode == 0, ran.stderr
        assert box.argvs("srun") == [["--label", "bash", "-c", tricky]]


# --- checkpoints: workload.resume_from staged, the directory exported at teardown ---------------

RESUME_FROM = "s3://ckpt-bucket/checkpoints/bert-0/"


@needs_namespace
def test_resume_from_is_staged_into_the_checkpoint_directory_once():
    spec = bert(resume_from=RESUME_FROM)
    checkpoint_dir = RunPaths(run_id="r").checkpoint_dir
    with sandbox(workdir=BERT["workdir"]) as box:
        script = prepare_script(spec, "r", jobs_log_group=LOG_GROUP, region=REGION)
        # When the head node is prepared twice (a retried Prepare head node)
        assert box.run(script).returncode == 0
        assert box.on_fsx(f"{checkpoint_dir}/step-20.json").exists()
        assert box.run(script).returncode == 0
        # Then the checkpoints were downloaded once, before any attempt could save newer ones
        staged = [argv for name, argv in work_calls(box) if name == "aws" and "--recursive" in argv]
        assert staged == [["s3", "cp", "--recursive", "--only-show-errors", RESUME_FROM, checkpoint_dir]]


@needs_namespace
def test_resume_from_an_empty_prefix_fails_prepare_naming_the_field():
    with sandbox(workdir=BERT["workdir"]) as box:
        done = box.run(
            prepare_script(bert(resume_from=RESUME_FROM), "r", jobs_log_group=LOG_GROUP, region=REGION),
            STUB_S3_EMPTY="1",
        )
    assert done.returncode != 0
    assert f"workload.resume_from: {RESUME_FROM} holds no objects" in done.stderr


@needs_namespace
def test_the_export_copies_the_checkpoint_directory_and_counts_the_files_it_copied():
    checkpoint_dir = RunPaths(run_id="r").checkpoint_dir
    destination = "s3://stack-config/checkpoints/r/"
    script = export_checkpoints_script(bert(), "r", destination=destination, region=REGION)
    with sandbox() as box:
        # Given nothing saved yet: nothing is copied, and it says so
        empty = box.run(script)
        assert empty.returncode == 0 and parse_checkpoint_export(empty.stdout) == 0
        assert box.calls("aws") == []
        # Given two checkpoints: the directory is copied whole to the destination
        for step in (10, 20):
            path = box.on_fsx(f"{checkpoint_dir}/step-{step}.json")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"step": step}))
        done = box.run(script)
        assert done.returncode == 0, done.stderr
        assert parse_checkpoint_export(done.stdout) == 2
        assert box.argvs("aws") == [["s3", "cp", "--recursive", "--no-progress", checkpoint_dir, destination]]
        # Given a job of a cancelled run that saves one more while the copy runs: what was copied is counted
        during = box.run(script, STUB_S3_WRITTEN_DURING_COPY="step-30.json")
        assert during.returncode == 0 and parse_checkpoint_export(during.stdout) == 3, during.stderr
        # And a copy that fails says so on stderr, with a non-zero exit
        failed = box.run(script, STUB_FAIL="aws")
        assert failed.returncode != 0 and "TRAINRUN-ERROR checkpoint-export" in failed.stderr


@pytest.mark.parametrize("destination", ["s3://bucket/checkpoints/r", "https://bucket/checkpoints/r/", "s3://b/x y/"])
def test_the_export_refuses_a_destination_that_is_not_an_s3_prefix(destination: str):
    with pytest.raises(ValueError, match="is not an s3:// prefix"):
        export_checkpoints_script(bert(), "r", destination=destination, region=REGION)


def test_an_export_that_printed_no_result_line_is_invalid():
    with pytest.raises(HeadNodeOutputInvalid, match="TRAINRUN-CHECKPOINTS"):
        parse_checkpoint_export("upload: ...\n")


# --- Compile / Train ------------------------------------------------------------------------------


def started_watchers(box: Sandbox, count: int = 1, timeout: float = 5.0) -> list[list[str]]:
    """The end watchers the submit scripts started (in the background: give the stub a moment)."""
    deadline = time.monotonic() + timeout
    while len(box.argvs("setsid")) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return box.argvs("setsid")


def submitted(box: Sandbox, script: str) -> tuple[int, bool]:
    before = len(box.argvs("setsid"))
    done = box.run(script)
    assert done.returncode == 0, done.stderr
    assert len(started_watchers(box, count=before + 1)) == before + 1
    return parse_submitted(done.stdout)


@needs_namespace
@budget(25)
@given(specs, run_ids, st.sampled_from(["compile", "train"]), st.integers(0, 255))
def test_submit_passes_every_value_through_and_the_wrapper_reports_the_exit_code(
    spec: RunSpec, run_id: str, job: str, exit_code: int
):
    assume(job == "train" or spec.workload.compile is not None)
    paths = RunPaths(run_id=run_id)
    command = spec.workload.compile if job == "compile" else spec.workload.train
    wrapper = f"{paths.run_dir}/{job}.sbatch.sh"
    script = submit_script(spec, run_id, job, end_key=END_KEY, config_bucket=CONFIG_BUCKET)  # type: ignore[arg-type]
    with sandbox(workdir=spec.workload.workdir) as box:
        box.on_fsx(workdir_path(spec, run_id)).mkdir(parents=True)
        assert submitted(box, script) == (SBATCH_ID, False)
        assert box.argvs("runuser") == [["-l", DEFAULT_USERS[spec.cluster.os], "-c", "bash -s"]]
        assert box.argvs("sbatch") == [
            [
                "--parsable",
                "--exclusive",
                "--no-requeue",
                f"--nodes={spec.capacity.nodes}",
                f"--job-name={slurm_job_name(run_id, job)}",  # type: ignore[arg-type]
                f"--output={paths.output_file(job)}",  # type: ignore[arg-type]
                "--open-mode=append",
                wrapper,
            ]
        ]
        assert box.calls("sbatch")[0].cwd == workdir_path(spec, run_id)

        # The wrapper, as Slurm runs it: srun of the command with the run's env, exiting with its code;
        # it prints no end marker (the end watcher does, as root).
        ran = box.run(f"exec /bin/bash {wrapper}\n", SLURM_JOB_ID=str(SBATCH_ID), STUB_SRUN_EXIT=str(exit_code))
        assert ran.returncode == exit_code
        assert "TRAINRUN-END" not in ran.stdout
        # The end watcher is started for the job, its key nowhere on a command line.
        (watcher,) = started_watchers(box)
        assert watcher[:2] == ["bash", "-c"] and watcher[3:] == ["trainrun-end-watch", str(SBATCH_ID)]
        assert all(END_KEY not in argv for call in box.calls() for argv in call.argv)
        assert END_KEY not in box.recorded_env("srun").values()
        srun = box.calls("srun")
        assert [c.argv for c in srun] == [["--label", "bash", "-c", command]]
        assert srun[0].cwd == workdir_path(spec, run_id)
        env = box.recorded_env("srun")
        assert {name: env.get(name) for name in spec.workload.env} == spec.workload.env

        # Submitting again finds the job: one sbatch, ever (its watcher is started again: one that
        # still runs makes the new one exit at once).
        assert submitted(box, script) == (SBATCH_ID, True)
        assert len(box.calls("sbatch")) == 1


@needs_namespace
def test_the_wrapper_reports_a_missing_workdir_as_a_failed_job():
    with sandbox() as box:
        box.on_fsx(workdir_path(bert(), "r")).mkdir(parents=True)
        assert submitted(box, submit_script(bert(), "r", "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET)) == (
            SBATCH_ID,
            False,
        )
        box.on_fsx(workdir_path(bert(), "r")).rmdir()
        ran = box.run("exec /bin/bash /fsx/trainrun/r/train.sbatch.sh\n", SLURM_JOB_ID="9")
        assert ran.returncode == 1
        assert box.calls("srun") == []


@pytest.fixture
def submit_box() -> Iterator[Sandbox]:
    if NAMESPACE_PROBLEM is not None:
        pytest.skip(f"execution tests: {NAMESPACE_PROBLEM}")
    with sandbox() as box:
        box.on_fsx(workdir_path(bert(), "r")).mkdir(parents=True)
        yield box


def test_submit_finds_a_finished_job_in_accounting(submit_box: Sandbox):
    submit_box.write("sacct.out", "77\n77.batch\n")
    assert submitted(
        submit_box, submit_script(bert(), "r", "compile", end_key=END_KEY, config_bucket=CONFIG_BUCKET)
    ) == (77, True)
    assert submit_box.calls("sbatch") == []
    assert submit_box.argvs("sacct") == [
        ["--noheader", "-X", "--parsable2", "--starttime=now-45days", "--name=trainrun-r-compile", "--format=JobID"]
    ]


def test_submit_finds_a_finished_job_slurmctld_remembers_when_accounting_is_disabled(submit_box: Sandbox):
    submit_box.write(
        "scontrol.out",
        "JobId=11 JobName=trainrun-r-compile-old UserId=ubuntu(1000) JobState=COMPLETED ExitCode=0:0\n"
        "JobId=12 JobName=trainrun-r-compile UserId=ubuntu(1000) JobState=FAILED ExitCode=1:0\n"
        "JobId=13 JobName=trainrun-other-compile UserId=ubuntu(1000) JobState=RUNNING ExitCode=0:0\n",
    )
    done = submit_box.run(
        submit_script(bert(), "r", "compile", end_key=END_KEY, config_bucket=CONFIG_BUCKET), STUB_SACCT="disabled"
    )
    assert done.returncode == 0, done.stderr
    assert parse_submitted(done.stdout) == (12, True)
    assert started_watchers(submit_box)[0][-1] == "12"
    assert submit_box.argvs("scontrol") == [["show", "job", "-o"]]
    assert submit_box.calls("sbatch") == []


def test_submit_does_not_submit_when_squeue_fails(submit_box: Sandbox):
    done = submit_box.run(
        submit_script(bert(), "r", "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET), STUB_FAIL="squeue"
    )
    assert done.returncode == 1
    assert "TRAINRUN-ERROR squeue failed: not submitting trainrun-r-train" in done.stderr
    assert submit_box.calls("sbatch") == []


def test_a_resubmission_is_a_new_job_that_runs_resume_with_its_attempt(submit_box: Sandbox):
    # Given a run that says how to resume, whose first attempt is still in Slurm's queue
    spec = bert(resume="./run.sh --resume_ckpt")
    assert submitted(submit_box, submit_script(spec, "r", "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET)) == (
        SBATCH_ID,
        False,
    )
    # When its second attempt is submitted, twice (a retried Lambda)
    second = submit_script(spec, "r", "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET, attempt=2)
    assert submitted(submit_box, second) == (SBATCH_ID, False)
    assert submitted(submit_box, second) == (SBATCH_ID, True)
    # Then it was sbatched once more, under a name of its own, never requeued by Slurm itself
    (first, resubmission) = submit_box.argvs("sbatch")
    assert "--job-name=trainrun-r-train" in first and "--job-name=trainrun-r-train-2" in resubmission
    assert "--no-requeue" in resubmission
    # And it runs workload.resume, with TRAINRUN_ATTEMPT=2 and the run's checkpoint directory
    ran = submit_box.run("exec /bin/bash /fsx/trainrun/r/train.sbatch.sh\n", SLURM_JOB_ID="2")
    assert ran.returncode == 0, ran.stderr
    assert submit_box.calls("srun")[-1].argv == ["--label", "bash", "-c", "./run.sh --resume_ckpt"]
    env = submit_box.recorded_env("srun")
    assert (env["TRAINRUN_ATTEMPT"], env["TRAINRUN_CHECKPOINT_DIR"]) == ("2", "/fsx/trainrun/r/checkpoints")
    # And its end watcher keeps its end record apart from the first attempt's
    assert header_values(end_watcher_script(spec, "r", "train", 2), "slurm-job-state.sh")["end_record"] == (
        "/fsx/trainrun/r/train-2.end"
    )


def test_a_run_without_resume_resubmits_train_and_attempts_beyond_its_retries_are_refused():
    # workload.retries given without resume: the resubmission runs `train` again
    spec = bert(retries=1)
    assert job_commands(spec, "r", "train", 2).srun == ("srun", "--label", "bash", "-c", BERT["train"])
    with pytest.raises(ValueError, match="allows attempts 1 to 2"):
        job_commands(spec, "r", "train", 3)
    # Without retries nor resume, no resubmission at all; compile is never resubmitted
    with pytest.raises(ValueError, match="allows attempts 1 to 1"):
        submit_script(bert(), "r", "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET, attempt=2)
    with pytest.raises(ValueError, match="allows attempts 1 to 1"):
        job_commands(bert(resume="./resume.sh"), "r", "compile", 2)


# --- the end watcher -------------------------------------------------------------------------------


def watch(box: Sandbox, spec: RunSpec, slurm_job_id: int = SBATCH_ID, key: str = END_KEY) -> str:
    """Run the end watcher in the foreground, as the submit script starts it (key in its environment)."""
    script = (
        f"export TRAINRUN_END_KEY={key}\n"
        f"exec /bin/bash -c {shlex.quote(end_watcher_script(spec, 'r', 'train'))} trainrun-end-watch {slurm_job_id}\n"
    )
    box.on_fsx("/fsx/trainrun/r/logs").mkdir(parents=True, exist_ok=True)
    done = box.run(script)
    assert done.returncode == 0, done.stderr
    return box.on_fsx("/fsx/trainrun/r/train.end").read_text()


@needs_namespace
@pytest.mark.parametrize(
    ("scontrol", "state", "exit_code"),
    [
        ("FAILED ExitCode=7:0", "FAILED", 7),
        ("COMPLETED ExitCode=0:0", "COMPLETED", 0),
        ("CANCELLED ExitCode=0:15", "CANCELLED", 143),
    ],
)
def test_the_end_watcher_signs_what_slurm_says_of_the_ended_job(scontrol: str, state: str, exit_code: int):
    with sandbox() as box:
        box.write("scontrol.out", f"JobId={SBATCH_ID} JobName=trainrun-r-train JobState={scontrol}\n")
        record = watch(box, bert())
        # The record on /fsx and the line appended to the job's output are the same signed marker.
        assert box.on_fsx("/fsx/trainrun/r/logs/train.out").read_text() == record
        event = parse_line(record)
        assert isinstance(event, EndEvent) and (event.state, event.exit_code) == (state, exit_code)
        assert is_authentic(event, run_id="r", job="train", end_key=END_KEY, slurm_job_id=SBATCH_ID)
        # Written as the default user, whose environment never held the key.
        assert END_KEY not in box.recorded_env("runuser").values()
        assert all(END_KEY not in argv for call in box.calls() for argv in call.argv)


@needs_namespace
def test_a_job_printing_a_marker_cannot_make_the_watcher_sign_a_success():
    with sandbox() as box:
        # Given a job that printed a forged success marker, then failed with exit code 7
        box.on_fsx("/fsx/trainrun/r/logs").mkdir(parents=True)
        forged = f"TRAINRUN-END run=r job=train slurm_job_id={SBATCH_ID} exit_code=0"
        box.on_fsx("/fsx/trainrun/r/logs/train.out").write_text(forged + "\n")
        box.write("scontrol.out", f"JobId={SBATCH_ID} JobState=FAILED ExitCode=7:0\n")
        # When the watcher reports the end
        record = watch(box, bert())
        # Then the only authentic marker says 7
        lines = box.on_fsx("/fsx/trainrun/r/logs/train.out").read_text().splitlines()
        verdicts = [
            is_authentic(event, run_id="r", job="train", end_key=END_KEY, slurm_job_id=SBATCH_ID)
            for event in map(parse_line, lines)
            if isinstance(event, EndEvent)
        ]
        assert verdicts == [False, True] and lines[-1] == record.strip()
        assert "exit_code=7 state=FAILED" in record


# Prints each variable named on the command line: S and its value, A, its length and its elements,
# or U when it is not set.
_PRINT_VARIABLES = """
for name; do
  if ! declare -p "$name" >/dev/null 2>&1; then
    printf '%s\\0' U
    continue
  fi
  declare -n value=$name
  if [[ "$(declare -p "$name")" == "declare -a"* ]]; then
    printf '%s\\0' A "${#value[@]}" "${value[@]}"
  else
    printf '%s\\0' S "$value"
  fi
  unset -n value
done
"""


def header_values(script: str, first_file: str) -> dict[str, str | list[str]]:
    """The values a script's rendered header (what comes before the shipped `first_file`) assigns,
    as bash reads them: a string for `name=<word>`, a list for a bash array `name=(<words>)`."""
    header = script[: script.index("\n" + shipped(first_file).rstrip("\n"))]
    # Lines of a value that spans lines may look like assignments too: bash says what is set.
    names = re.findall(r"^([a-z_]+)=", header, re.M)
    done = subprocess.run(
        ["bash", "-c", f"{header}\n{_PRINT_VARIABLES}", "bash", *names], capture_output=True, check=True
    )
    fields = iter(done.stdout.decode().split("\0")[:-1])
    values: dict[str, str | list[str]] = {}
    for name in names:
        kind = next(fields)
        if kind == "S":
            values[name] = next(fields)
        elif kind == "A":
            values[name] = [next(fields) for _ in range(int(next(fields)))]
    return values


def shipped(name: str) -> str:
    return resources.files("trainrun").joinpath("scripts", name).read_text(encoding="utf-8")


def test_the_end_watcher_is_its_header_then_the_shipped_scripts():
    script = end_watcher_script(bert(), "r", "train")

    assert script.endswith(shipped("slurm-job-state.sh").rstrip("\n") + "\n" + shipped("end-watcher.sh"))
    assert header_values(script, "slurm-job-state.sh") == {
        "slurm_bin_dir": head_node_scripts.SLURM_BIN_DIR,
        "run_id": "r",
        "job": "train",
        "run_user": "ubuntu",
        "output_file": "/fsx/trainrun/r/logs/train.out",
        "end_record": "/fsx/trainrun/r/train.end",
        "watchers": RunPaths(run_id="r").watchers_dir,
        "running_states": " ".join(sorted(head_node_scripts.RUNNING_STATES)),
        "poll_seconds": "2",
    }


def test_the_end_watchers_poll_is_a_tenth_of_a_second_to_a_minute():
    # The local runtime's AWS clock compresses it; anything else is refused rather than spin or stall
    fast = end_watcher_script(bert(), "r", "train", poll_seconds=0.1)
    assert header_values(fast, "slurm-job-state.sh")["poll_seconds"] == "0.1"
    for bad in (0.0, 0.05, 61.0):
        with pytest.raises(ValueError, match=r"0\.1 to 60 seconds"):
            end_watcher_script(bert(), "r", "train", poll_seconds=bad)


def test_the_watcher_waits_exactly_while_the_state_is_one_the_parser_calls_running():
    running_states = header_values(end_watcher_script(bert(), "r", "train"), "slurm-job-state.sh")["running_states"]
    is_running = re.search(r"^is_running\(\) \{$.*?^\}$", shipped("end-watcher.sh"), re.M | re.S)
    assert is_running is not None
    not_running = ["COMPLETED", "FAILED", "UNKNOWN", "", "RUNNING PENDING", "*", "RUN"]
    states = [*sorted(head_node_scripts.RUNNING_STATES), *not_running]
    program = (
        f"running_states={shlex.quote(running_states)}\n{is_running.group()}\n"
        'for state in "$@"; do if is_running "$state"; then echo yes; else echo no; fi; done\n'
    )

    done = subprocess.run(["bash", "-c", program, "bash", *states], capture_output=True, text=True, check=True)

    assert dict(zip(states, done.stdout.split(), strict=True)) == {
        state: "yes" if state in head_node_scripts.RUNNING_STATES else "no" for state in states
    }


def test_the_status_script_runs_its_header_then_the_shipped_scripts_in_bash():
    script = status_script(123, "r", "train")
    (body,) = heredoc_bodies(script)

    shipped_scripts = [
        shipped(name).rstrip("\n") for name in ("slurm-job-state.sh", "compute-nodes.sh", "job-status.sh")
    ]
    assert "\n".join(shipped_scripts) in body
    assert header_values(body, "slurm-job-state.sh") == {
        "slurm_bin_dir": head_node_scripts.SLURM_BIN_DIR,
        "slurm_job_id": "123",
        "end_record": "/fsx/trainrun/r/train.end",
    }


def root_part(script: str) -> str:
    """What an SSM script runs as root with sh before the command its heredoc feeds."""
    return script[: script.index(" <<'TRAINRUN_EOF")].rsplit("\n", 1)[0]


def run_prepare_as_root(
    tmp_path: Path, fsx_mount_dir: str, *, node_configured: bool = True
) -> subprocess.CompletedProcess[str]:
    """prepare-as-root.sh with /fsx at `fsx_mount_dir`, no wait for its mount or the head node's
    OnNodeConfigured (finished if `node_configured`), and no CloudWatch agent."""
    marker = tmp_path / "node-configured"
    if node_configured:
        marker.write_text("configured\n")
    header = "".join(
        f"{name}={shlex.quote(value)}\n"
        for name, value in {
            "fsx_mount_dir": fsx_mount_dir,
            "fsx_mount_wait_seconds": "0",
            "node_configured_marker": str(marker),
            "cloudwatch_ctl": str(tmp_path / "no-agent"),
            "run_user": "nobody",
            "run_dir": str(tmp_path / "run"),
            "dataset_dir": "",
            "agent_config_dir": str(tmp_path / "etc"),
            "agent_config_file": str(tmp_path / "etc" / "agent.json"),
            "agent_config": "{}",
        }.items()
    )
    script = header + shipped("prepare-as-root.sh")
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30, check=False)


def test_the_preparation_stops_with_a_clear_error_when_fsx_is_not_mounted_in_time(tmp_path: Path) -> None:
    # Given a head node whose /fsx is still an empty directory of its root volume (the cluster is
    # being created: its configuration has not mounted the file system yet)
    (tmp_path / "fsx").mkdir()
    # When the preparation runs there, and the mount does not come within its wait
    result = run_prepare_as_root(tmp_path, str(tmp_path / "fsx"))
    # Then it fails saying so, and wrote nothing there
    assert result.returncode == 1
    assert "TRAINRUN-ERROR fsx-not-mounted: " in result.stderr and str(tmp_path / "fsx") in result.stderr
    assert not (tmp_path / "run").exists()


def test_the_preparation_goes_on_once_fsx_is_mounted(tmp_path: Path) -> None:
    # Given a mounted file system (the root file system stands in for it)
    # When the preparation runs
    result = run_prepare_as_root(tmp_path, "/")
    # Then it is past the wait: it says so, and stops at the next check (no CloudWatch agent here)
    assert "TRAINRUN-STEP fsx-mounted" in result.stdout
    assert "cloudwatch-agent-missing" in result.stderr


def test_the_preparation_waits_for_the_head_nodes_on_node_configured_and_stops_clearly_when_it_does_not_end(
    tmp_path: Path,
) -> None:
    # Given a head node whose file system is mounted but whose OnNodeConfigured (the Neuron
    # environment the workload's setup activates) has not finished: ParallelCluster runs it after the mounts
    # When the preparation runs there, and OnNodeConfigured does not end within its wait
    result = run_prepare_as_root(tmp_path, "/", node_configured=False)
    # Then it fails naming the cause, and wrote nothing for the run
    assert result.returncode == 1
    assert "TRAINRUN-STEP fsx-mounted" in result.stdout
    assert "TRAINRUN-ERROR node-not-configured: the head node's OnNodeConfigured has not finished" in result.stderr
    assert "TRAINRUN-STEP node-configured" not in result.stdout
    assert not (tmp_path / "run").exists()


def test_the_preparation_goes_on_once_the_head_nodes_on_node_configured_has_finished(tmp_path: Path) -> None:
    # Given a head node whose file system is mounted and whose OnNodeConfigured wrote its marker
    # When the preparation runs
    result = run_prepare_as_root(tmp_path, "/", node_configured=True)
    # Then it is past both waits
    assert "TRAINRUN-STEP node-configured" in result.stdout
    assert "cloudwatch-agent-missing" in result.stderr


def test_the_prepare_script_is_roots_header_and_file_then_the_default_users_in_bash():
    spec = bert()
    paths = RunPaths(run_id="r")
    script = prepare_script(spec, "r", jobs_log_group=LOG_GROUP, region=REGION)
    root, (as_user,) = root_part(script), heredoc_bodies(script)

    assert root.endswith("\n" + shipped("prepare-as-root.sh").rstrip("\n"))
    assert header_values(root, "prepare-as-root.sh") == {
        "fsx_mount_dir": "/fsx",
        "fsx_mount_wait_seconds": str(head_node_scripts.FSX_MOUNT_WAIT_SECONDS),
        "node_configured_marker": NODE_CONFIGURED_MARKER,
        "cloudwatch_ctl": CLOUDWATCH_AGENT_CTL,
        "run_user": "ubuntu",
        "run_dir": paths.run_dir,
        "dataset_dir": "/fsx/examples_datasets",
        "agent_config_dir": head_node_scripts.CLOUDWATCH_AGENT_CONFIG_DIR,
        "agent_config_file": head_node_scripts.cloudwatch_agent_config_path("r"),
        "agent_config": json.dumps(head_node_scripts.cloudwatch_agent_config("r", jobs_log_group=LOG_GROUP), indent=2),
    }
    assert as_user.endswith("\n" + shipped("prepare-as-user.sh").rstrip("\n"))
    archive = "/fsx/examples_datasets/seqlen128.tar"
    values = header_values(as_user, "prepare-as-user.sh")
    assert {
        name: values[name] for name in ("clone_command", "setup_command", "workload_env", "dataset_unpack_command")
    } == {
        "clone_command": ["git", "clone", "--", BERT["source"]["git"], paths.workload_dir + ".partial"],
        "setup_command": ["bash", "-lc", BERT["setup"]],
        "workload_env": [f"{name}={value}" for name, value in BERT["env"].items()],
        "dataset_unpack_command": ["tar", "-xf", archive, "-C", "/fsx/examples_datasets"],
    }


def test_a_step_the_run_does_not_have_is_an_empty_command_in_the_header():
    spec = bert(source={"s3": "s3://bucket/w.tgz"}, setup=None, dataset=None)
    values = header_values(
        heredoc_bodies(prepare_script(spec, "r", jobs_log_group=LOG_GROUP, region=REGION))[0], "prepare-as-user.sh"
    )

    assert values["clone_command"] == [] and values["setup_command"] == [] and values["dataset_download_command"] == []
    assert values["download_command"] == ["aws", "s3", "cp", "s3://bucket/w.tgz", "-"]
    assert values["dataset_dir"] == ""


def test_the_submit_script_is_roots_header_and_file_then_the_default_users_in_bash():
    spec = bert()
    script = submit_script(spec, "r", "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET)
    root, (as_user,) = root_part(script), heredoc_bodies(script)

    assert root.endswith("\n" + shipped("submit-as-root.sh").rstrip("\n"))
    assert header_values(root, "submit-as-root.sh") == {
        "end_key": END_KEY,
        "end_watcher": end_watcher_script(spec, "r", "train"),
    }
    # The key stays in root's part: the default user's part never holds it.
    assert END_KEY not in as_user
    assert as_user.endswith("\n" + shipped("submit-as-user.sh").rstrip("\n"))
    values = header_values(as_user, "submit-as-user.sh")
    assert values["wrapper_script"] == head_node_scripts.wrapper_script(spec, "r", "train", config_bucket=CONFIG_BUCKET)
    assert values["sbatch_command"] == list(head_node_scripts.job_commands(spec, "r", "train").sbatch)


def test_the_wrapper_is_bash_with_its_header_then_the_shipped_file():
    wrapper = head_node_scripts.wrapper_script(bert(), "r", "compile", config_bucket=CONFIG_BUCKET)

    assert wrapper.startswith("#!/bin/bash\n# trainrun: the compile job of run r.")
    assert wrapper.endswith("\n" + shipped("job-wrapper.sh"))
    assert header_values(wrapper, "job-wrapper.sh") == {
        "workdir_path": workdir_path(bert(), "r"),
        "checkpoint_dir": "/fsx/trainrun/r/compile-checkpoints",
        "attempt": "1",
        "workload_env": [
            *(f"{name}={value}" for name, value in BERT["env"].items()),
            f"NEURON_COMPILE_CACHE_URL=s3://{CONFIG_BUCKET}/neuron-compile-cache/trn1.32xlarge/",
        ],
        "srun_command": ["srun", "--label", "bash", "-c", BERT["compile"]],
    }


def test_the_compile_jobs_checkpoint_directory_is_its_own_and_outside_the_exported_one() -> None:
    # Given a run's compile and train jobs (neuron_parallel_compile runs the training script as a trial)
    def checkpoint_dir(job: str) -> str:
        wrapper = head_node_scripts.wrapper_script(bert(), "r", job, config_bucket=CONFIG_BUCKET)
        return str(header_values(wrapper, "job-wrapper.sh")["checkpoint_dir"])

    # Then the train job gets the run's checkpoints, the one the export copies and a resubmission resumes from
    exported = RunPaths(run_id="r").checkpoint_dir
    assert checkpoint_dir("train") == exported
    # And the compile job's trial saves elsewhere: not in it, and not in a directory it holds
    assert not (checkpoint_dir("compile") + "/").startswith(exported + "/")
    assert not (exported + "/").startswith(checkpoint_dir("compile") + "/")


@pytest.mark.parametrize("job", ["compile", "train"])
def test_both_jobs_get_the_same_compile_cache_and_off_removes_it(job: str) -> None:
    def cache_words(spec: RunSpec) -> list[str]:
        env = header_values(
            head_node_scripts.wrapper_script(spec, "r", job, config_bucket=CONFIG_BUCKET), "job-wrapper.sh"
        )
        return [word for word in env["workload_env"] if word.startswith("NEURON_COMPILE_CACHE_URL=")]

    # The stack's cache for the instance type, the same URL in both jobs (the Neuron docs require it)
    assert cache_words(bert()) == [f"NEURON_COMPILE_CACHE_URL=s3://{CONFIG_BUCKET}/neuron-compile-cache/trn1.32xlarge/"]
    # A run's own prefix, as a prefix
    own = bert(compile_cache="s3://team-cache/neuron")
    assert cache_words(own) == ["NEURON_COMPILE_CACHE_URL=s3://team-cache/neuron/"]
    # off: no variable at all (the Neuron default, a directory on each node)
    assert cache_words(bert(compile_cache="off")) == []


# Env names that are also the names of the scripts' own variables.
_SCRIPT_VARIABLES = ("setup_command", "workdir_path", "checkpoint_dir", "attempt", "workload_env", "srun_command")
COLLIDING_ENV = {name: f"the run's {name}" for name in (*_SCRIPT_VARIABLES, "code", "command", "rc")}


@needs_namespace
def test_the_runs_env_changes_none_of_the_scripts_own_variables():
    spec = bert(env=COLLIDING_ENV, dataset=None)
    with sandbox(workdir=BERT["workdir"]) as box:
        # The setup runs as it is, from the workdir, and sees the run's values
        done = box.run(prepare_script(spec, "r", jobs_log_group=LOG_GROUP, region=REGION))
        assert done.returncode == 0, done.stderr
        assert [c.argv for c in box.calls("bash") if c.argv[:1] == ["-lc"]] == [["-lc", BERT["setup"]]]
        assert {name: box.recorded_env("bash").get(name) for name in COLLIDING_ENV} == COLLIDING_ENV
        # The job runs its command from the workdir with the run's values, and exits with its code
        assert submitted(box, submit_script(spec, "r", "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET)) == (
            SBATCH_ID,
            False,
        )
        ran = box.run("exec /bin/bash /fsx/trainrun/r/train.sbatch.sh\n", SLURM_JOB_ID="1", STUB_SRUN_EXIT="3")
        assert ran.returncode == 3, ran.stderr
        (srun,) = box.calls("srun")
        assert (srun.argv, srun.cwd) == (["--label", "bash", "-c", BERT["train"]], workdir_path(spec, "r"))
        assert {name: box.recorded_env("srun").get(name) for name in COLLIDING_ENV} == COLLIDING_ENV
        # ... and the run's checkpoint directory, made before the job starts, and its attempt
        assert box.recorded_env("srun")["TRAINRUN_CHECKPOINT_DIR"] == "/fsx/trainrun/r/checkpoints"
        assert box.recorded_env("srun")["TRAINRUN_ATTEMPT"] == "1"


# --- Slurm's view of a job ------------------------------------------------------------------------


@pytest.fixture
def status_box() -> Iterator[Sandbox]:
    with sandbox(with_agent=False) as box:
        yield box


def job_state(box: Sandbox, slurm_job_id: int = 42, env: dict[str, str] | None = None) -> str:
    path = box.root / "status.sh"
    path.write_text(status_script(slurm_job_id, "r", "train"))
    done = subprocess.run(
        ["sh", str(path)], env={**box.env, **(env or {})}, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # One line, and for a pending job what Slurm says of the compute nodes it waits for.
    assert all(line.startswith(("TRAINRUN-QUEUE ", "TRAINRUN-NODE-DOWN ")) for line in lines[1:]), lines
    return lines[0]


@pytest.mark.parametrize(
    ("sacct", "line"),
    [
        ("COMPLETED|0:0\n", "state=COMPLETED exit_code=0"),
        ("FAILED|3:0\n", "state=FAILED exit_code=3"),
        ("CANCELLED by 1000|0:15\n", "state=CANCELLED exit_code=143"),
        ("RUNNING|0:0\n", "state=RUNNING exit_code=0"),
        ("PENDING|0:0\n", "state=PENDING exit_code=0"),
        ("TIMEOUT|0:1\n", "state=TIMEOUT exit_code=129"),
    ],
)
def test_status_asks_accounting_first(status_box: Sandbox, sacct: str, line: str):
    status_box.write("sacct.out", sacct)
    status_box.write("scontrol.out", "JobId=42 JobState=RUNNING ExitCode=0:0\n")
    assert job_state(status_box) == f"TRAINRUN-JOB-STATE slurm_job_id=42 {line}"
    assert status_box.argvs("sacct") == [["-j", "42", "-X", "--noheader", "--parsable2", "--format=State,ExitCode"]]
    assert status_box.calls("scontrol") == []


@pytest.mark.parametrize("sacct_env", [{"STUB_SACCT": "disabled"}, {}], ids=["accounting disabled", "job not in it"])
def test_status_falls_back_to_slurmctld(status_box: Sandbox, sacct_env: dict[str, str]):
    status_box.write(
        "scontrol.out",
        "JobId=42 JobName=trainrun-r-train UserId=ubuntu(1000) GroupId=ubuntu(1000) Priority=1 "
        "JobState=FAILED Reason=NonZeroExitCode Dependency=(null) ExitCode=2:0 RunTime=00:00:01\n",
    )
    assert job_state(status_box, env=sacct_env) == "TRAINRUN-JOB-STATE slurm_job_id=42 state=FAILED exit_code=2"
    assert status_box.argvs("scontrol") == [["show", "job", "-o", "42"]]


def test_status_reads_the_end_record_when_slurm_has_forgotten_the_job(status_box: Sandbox):
    record = end_marker(END_KEY, run_id="r", job="train", slurm_job_id=7, exit_code=0, state="COMPLETED", ended_at=1)
    status_box.fsx.joinpath("trainrun", "r").mkdir(parents=True)
    status_box.fsx.joinpath("trainrun", "r", "train.end").write_text(record + "\n")
    path = status_box.root / "status.sh"
    path.write_text(status_script(7, "r", "train"))
    done = status_box.run(path.read_text(), STUB_SACCT="disabled")
    assert done.returncode == 0, done.stderr
    state = parse_job_state(done.stdout)
    assert (state.state, state.end_record) == ("UNKNOWN", record)


def test_status_of_a_job_nobody_knows(status_box: Sandbox):
    line = job_state(status_box, 7, env={"STUB_SACCT": "disabled"})
    assert line == "TRAINRUN-JOB-STATE slurm_job_id=7 state=UNKNOWN exit_code=-1"
    assert parse_job_state(line) == JobState(state="UNKNOWN", exit_code=-1, finished=True, succeeded=False)


def test_status_of_a_pending_job_says_which_nodes_are_not_up_with_slurms_reason(status_box: Sandbox):
    # Given a pending job, its queue's partition INACTIVE, one node up and two that never came up
    status_box.write("sacct.out", "PENDING|0:0\n")
    status_box.write("sinfo-partitions.out", "compute inactive\n")
    status_box.write(
        "sinfo.out",
        "compute-st-trn1-1|idle|none\n"
        "compute-st-trn1-2|down|Node bootstrap error: Failed to execute OnNodeConfigured script 1, return code: 1.\n"
        "compute-st-trn1-3|idle#|none\n",
    )
    # When the status script asks Slurm about the job
    done = status_box.run(status_script(42, "r", "compile"))
    assert done.returncode == 0, done.stderr
    # Then it reports the nodes that are not up, each with Slurm's reason, and the inactive partition
    state = parse_job_state(done.stdout)
    assert state.queue == QueueState(
        nodes=3,
        up=1,
        inactive_partitions=1,
        down=(
            DownNode(
                "compute-st-trn1-2",
                "down",
                "Node bootstrap error: Failed to execute OnNodeConfigured script 1, return code: 1.",
            ),
            DownNode("compute-st-trn1-3", "idle#", "none"),
        ),
    )


def test_status_of_a_running_job_does_not_ask_about_the_nodes(status_box: Sandbox):
    status_box.write("sacct.out", "RUNNING|0:0\n")
    done = status_box.run(status_script(42, "r", "train"))
    assert done.returncode == 0, done.stderr
    assert parse_job_state(done.stdout).queue is None
    assert status_box.calls("sinfo") == []


def test_status_of_a_pending_job_lists_at_most_ten_nodes_that_are_not_up(status_box: Sandbox):
    status_box.write("sacct.out", "PENDING|0:0\n")
    status_box.write("sinfo.out", "".join(f"compute-st-trn1-{n}|down*|Not responding\n" for n in range(1, 65)))
    done = status_box.run(status_script(42, "r", "train"))
    queue = parse_job_state(done.stdout).queue
    assert queue is not None and (queue.nodes, queue.up, queue.inactive_partitions) == (64, 0, 0)
    assert [node.name for node in queue.down] == [f"compute-st-trn1-{n}" for n in range(1, 11)]


# --- parsers ----------------------------------------------------------------------------------------


def test_the_node_states_count_each_node_once_and_only_plain_idle_as_idle(status_box: Sandbox):
    # Given sinfo's nodes, one of them in two partitions, one replaced and powering up, one down
    status_box.write(
        "sinfo.out",
        "compute-st-trn1-1 idle\ncompute-st-trn1-1 idle\ncompute-st-trn1-2 idle#\n"
        "compute-st-trn1-3 down*\ncompute-st-trn1-4 idle~\ncompute-st-trn1-5 idle\n",
    )
    done = status_box.run(node_states_script("r"))
    assert done.returncode == 0, done.stderr
    assert status_box.argvs("sinfo")[0] == ["--noheader", "--Node", "--format=%N %t"]
    states = parse_node_states(done.stdout)
    assert (states.total, states.idle) == (5, 2)


def test_the_node_states_say_when_the_queue_is_in_protected_mode(status_box: Sandbox):
    # Given a queue ParallelCluster set INACTIVE, its node drained with its bootstrap error
    status_box.write("sinfo-partitions.out", "compute inactive\n")
    status_box.write("sinfo.out", "compute-st-trn1-1|drain|Node bootstrap error: no driver\n")
    done = status_box.run(node_states_script("r"))
    assert done.returncode == 0, done.stderr
    assert parse_node_states(done.stdout).queue == QueueState(
        nodes=1,
        up=0,
        inactive_partitions=1,
        down=(DownNode("compute-st-trn1-1", "drain", "Node bootstrap error: no driver"),),
    )


def test_the_stop_script_of_a_pending_job_reports_its_state_and_queue_as_the_status_script_does(
    status_box: Sandbox,
):
    status_box.write("sacct.out", "PENDING|0:0\n")
    done = status_box.run(head_node_scripts.stop_script(42, "r", "train"))
    assert done.returncode == 0, done.stderr
    state = parse_job_state(done.stdout)
    assert state.state == "PENDING" and state.queue is not None


def test_parse_node_states_names_the_missing_line():
    with pytest.raises(HeadNodeOutputInvalid, match="TRAINRUN-NODES total=<n> idle=<n>"):
        parse_node_states("sinfo: error: slurm_load_partitions: Unable to contact slurm controller\n")


def test_parse_submitted():
    out = "noise\nTRAINRUN-SUBMITTED job=train slurm_job_id=17 existing=false\n"
    assert parse_submitted(out) == (17, False)
    assert parse_submitted("TRAINRUN-SUBMITTED job=compile slurm_job_id=5 existing=true\r\n") == (5, True)


@pytest.mark.parametrize(
    "out", ["", "Submitted batch job 17\n", "TRAINRUN-SUBMITTED job=train slurm_job_id=x existing=false"]
)
def test_parse_submitted_names_the_missing_line(out: str):
    with pytest.raises(HeadNodeOutputInvalid, match="TRAINRUN-SUBMITTED"):
        parse_submitted(out)


@pytest.mark.parametrize(
    ("state", "exit_code", "finished", "succeeded"),
    [
        ("COMPLETED", 0, True, True),
        ("COMPLETED", 1, True, False),
        ("FAILED", 3, True, False),
        ("CANCELLED", 143, True, False),
        ("TIMEOUT", 0, True, False),
        ("OUT_OF_MEMORY", 0, True, False),
        ("NODE_FAIL", 0, True, False),
        ("PENDING", 0, False, False),
        ("RUNNING", 0, False, False),
        ("CONFIGURING", 0, False, False),
        ("COMPLETING", 0, False, False),
        ("SUSPENDED", 0, False, False),
        ("REQUEUED", 0, False, False),
        ("UNKNOWN", -1, True, False),
    ],
)
def test_parse_job_state(state: str, exit_code: int, finished: bool, succeeded: bool):
    out = f"TRAINRUN-JOB-STATE slurm_job_id=9 state={state} exit_code={exit_code}\n"
    assert parse_job_state(out) == JobState(state, exit_code, finished, succeeded)


@pytest.mark.parametrize("out", ["", "TRAINRUN-JOB-STATE slurm_job_id=9 state=done exit_code=0", "state=COMPLETED"])
def test_parse_job_state_names_the_missing_line(out: str):
    with pytest.raises(HeadNodeOutputInvalid, match="TRAINRUN-JOB-STATE"):
        parse_job_state(out)


@given(st.text(max_size=200))
def test_the_parsers_raise_only_their_typed_error(text: str):
    for parse in (parse_submitted, parse_job_state):
        with contextlib.suppress(HeadNodeOutputInvalid):
            parse(text)


def test_the_cloudwatch_agent_flushes_the_job_logs_every_second_not_every_five():
    # A job's end reaches the workflow as its end marker, a line of its output file the agent ships.
    config = head_node_scripts.cloudwatch_agent_config("r", jobs_log_group=LOG_GROUP)

    assert config["logs"]["force_flush_interval"] == 1
