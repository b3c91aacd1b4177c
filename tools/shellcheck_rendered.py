"""shellcheck over every script trainrun ships or renders: `python -m tools.shellcheck_rendered [--keep DIR]`.

`make lint-shell` runs it (beside shellcheck over the repository's other `.sh` files), and
tests/unit/test_shellcheck_rendered.py runs it under `make test`. It checks the shell code shipped
in trainrun/scripts/ as it is, then renders, for each run file in examples/ and for variants of
them that take every branch of the renderers (git source with and without a ref, S3 archives,
datasets synced, copied and unpacked, with and without setup, compile and env), the head node's
scripts (trainrun.logic.head_node_scripts: prepare, submit, the sbatch wrapper, the end watcher,
the job status), the Neuron install script for every OS (trainrun.logic.neuron_install) and the
local head node's stand-ins (trainrun.local.slurm_head_node), and shellchecks them all.

The head node's scripts run in two shells: SSM runs the outer script with sh, and it feeds the
real work to `bash -s` as a quoted heredoc, which shellcheck reads as data. So each heredoc body
is cut out and checked as bash on its own; so is the end watcher, which the submit script passes
to `bash -c`.

A head-node script is a header of quoted values in front of shipped shell code. Its renders are
checked with every check but SC2016 ("expressions don't expand in single quotes"), which flags
each value holding a `$` (a shell field, an env value, the wrapper or end watcher a script
carries): there, a single-quoted word is a value that trainrun.logic.shell_quoting.quote quoted so that
it does *not* expand. The shipped code itself is checked with SC2016, as its files. Hostile
variants put quotes, `$(...)`, backticks, newlines, heredoc delimiters and non-ASCII text in every
field that takes them (the shell fields and env values).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from trainrun.local import slurm_head_node
from trainrun.logic import head_node_scripts, neuron_install
from trainrun.model.jobs import JOB_KINDS
from trainrun.model.run_file import RunSpec, parse_run_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
REGION = "us-west-2"
JOBS_LOG_GROUP = "/trainrun/lint/jobs"
END_KEY = "0f" * 32
CONFIG_BUCKET = "trainrun-config-shellcheck"
SLURM_JOB_ID = 4242
# What a run-file value that is data may hold (trainrun.logic.shell_quoting.quote keeps it one word), by field.
HOSTILE_COMMAND = (
    'echo "it\'s" \'a "quote"\' $(id -u) `uname` ${HOME} \\$ \\\n'
    "  && printf '%s\\n' 'ünïcödé ✓ 雪'\n"
    "TRAINRUN_EOF\n"
    "TRAINRUN_EOF_1\n"
    "cat <<'EOF'\n"
    "\t$(rm -rf /)\n"
    "EOF\n"
    "'"
)
HOSTILE_ENV_VALUE = 'it\'s "$(id -u)" `uname` ${HOME} \\ ; | & > < * ? ~ # !'
# For the head node's rendered scripts: SC2016 there is shellcheck's guess that a quoted value was meant to expand.
QUOTED_VALUES_EXCLUDES = ("SC2016",)
HEREDOC = re.compile(r"^(?P<command>.*) <<'(?P<delimiter>[A-Za-z0-9_]+)'$")


@dataclass(frozen=True)
class Rendered:
    """One script as trainrun renders it, and how to check it."""

    name: str  # a relative path naming what it is: <variant>/<script>.sh
    text: str
    # The shell that runs it, for a fragment that does not say so itself (a heredoc body, a `bash -c`
    # program); None for a whole script, whose shebang must say it.
    interpreter: str | None = None
    hostile: bool = False
    excludes: tuple[str, ...] = ()


# --- run files ------------------------------------------------------------------------------------


def _variants() -> Iterator[tuple[str, RunSpec, bool]]:
    """(name, spec, hostile) for every example and the variants derived from it."""
    for path in sorted(EXAMPLES.glob("*.yaml")):
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        yield path.stem, parse_run_file(path.read_text(encoding="utf-8")), False
        for suffix, change, hostile in _CHANGES:
            varied = _deep_copy(document)
            change(varied["workload"])
            yield f"{path.stem}-{suffix}", parse_run_file(yaml.safe_dump(varied, allow_unicode=True)), hostile


def _deep_copy(document: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(yaml.safe_dump(document))


def _git(ref: str | None) -> dict[str, str]:
    return {"git": "https://github.com/aws-neuron/aws-neuron-samples.git", **({"ref": ref} if ref else {})}


def _plain(workload: dict[str, Any]) -> None:
    """Nothing optional: no setup, compile, dataset or env; a git source at origin's HEAD."""
    for key in ("setup", "compile", "dataset", "env"):
        workload.pop(key, None)
    workload["source"] = _git(None)


def _everything(workload: dict[str, Any]) -> None:
    """Every optional field, with ordinary values: a commit ref, setup, a dataset directory, env."""
    workload["source"] = _git("0123abcd")
    workload["setup"] = 'python3 -m venv "$HOME/venv" && "$HOME/venv/bin/pip" install -r requirements.txt'
    workload["compile"] = 'cd "$HOME" && neuron_parallel_compile python3 train.py'
    workload["train"] = 'python3 train.py --output "$HOME/out"'
    workload["resume"] = 'python3 train.py --output "$HOME/out" --resume "$TRAINRUN_CHECKPOINT_DIR"'
    workload["dataset"] = {"source": "s3://trainrun-examples/datasets/wiki/", "path": "/fsx/datasets/wiki/"}
    workload["env"] = {"NEURON_RT_EXEC_TIMEOUT": "600", "XLA_FLAGS": "--xla_dump_to=/fsx/dump"}
    workload["resume_from"] = "s3://trainrun-examples/checkpoints/bert-large-0a1b2c3d/"


def _archives(workload: dict[str, Any]) -> None:
    """An S3 .tgz workload and a .tar.gz dataset (unpacked); no compile."""
    workload["source"] = {"s3": "s3://trainrun-examples/workload.tgz"}
    workload.pop("compile", None)
    workload["dataset"] = {"source": "s3://trainrun-examples/datasets/wiki.tar.gz", "path": "/fsx/wiki"}


def _single_object(workload: dict[str, Any]) -> None:
    """An S3 .tar workload and a dataset that is one object, copied as it is."""
    workload["source"] = {"s3": "s3://trainrun-examples/workload.tar"}
    workload["dataset"] = {"source": "s3://trainrun-examples/datasets/train.bin", "path": "/fsx"}


def _hostile(workload: dict[str, Any]) -> None:
    """Every field that takes free text, full of what a shell would read as code; a branch ref."""
    workload["source"] = _git("release/v1.2-rc_3")
    workload["workdir"] = "_.x/-dash/dot.dot"
    workload["setup"] = HOSTILE_COMMAND
    workload["compile"] = HOSTILE_COMMAND
    workload["train"] = HOSTILE_COMMAND
    workload["resume"] = HOSTILE_COMMAND
    workload["retries"] = 10
    workload["env"] = {"HOSTILE": HOSTILE_ENV_VALUE, "EMPTY": "", "_x1": "'"}
    workload["dataset"] = {"source": "s3://trainrun-examples/a=b/c+d/e_f.tar", "path": "/fsx/a.b/-c_d/"}


_CHANGES = (
    ("plain", _plain, False),
    ("everything", _everything, False),
    ("archives", _archives, False),
    ("single-object", _single_object, False),
    ("hostile", _hostile, True),
)


# --- what is rendered -----------------------------------------------------------------------------


def rendered_scripts() -> list[Rendered]:
    """Every script trainrun ships, then every script it renders, for every variant of every example run file."""
    # Each shipped file names its shell in a `# shellcheck shell=...` directive.
    scripts = [Rendered(f"shipped/{path.name}", path.read_text(encoding="utf-8")) for path in shipped_scripts()]
    for variant, spec, hostile in _variants():
        run_id = f"{spec.name}-0a1b2c3d"
        whole = [
            (
                "prepare.sh",
                head_node_scripts.prepare_script(spec, run_id, jobs_log_group=JOBS_LOG_GROUP, region=REGION),
            )
        ]
        for job in JOB_KINDS:
            if job == "compile" and spec.workload.compile is None:
                continue
            # Compile's submission queues train behind it, as Submit job sends it.
            chained_end_key = END_KEY if job == "compile" else None
            submit = head_node_scripts.submit_script(
                spec, run_id, job, end_key=END_KEY, config_bucket=CONFIG_BUCKET, chained_end_key=chained_end_key
            )
            whole.append((f"{job}-submit.sh", submit))
            wrapper = head_node_scripts.wrapper_script(spec, run_id, job, config_bucket=CONFIG_BUCKET)
            whole.append((f"{job}-wrapper.sh", wrapper))
            scripts.append(
                Rendered(
                    f"{variant}/{job}-end-watcher.bash",
                    head_node_scripts.end_watcher_script(spec, run_id, job),
                    interpreter="bash",
                    hostile=hostile,
                    excludes=QUOTED_VALUES_EXCLUDES,
                )
            )
            whole.append((f"{job}-status.sh", head_node_scripts.status_script(SLURM_JOB_ID, run_id, job)))
            whole.append((f"{job}-stop.sh", head_node_scripts.stop_script(SLURM_JOB_ID, run_id, job)))
        destination = f"s3://trainrun-config/checkpoints/{run_id}/"
        whole.append(
            (
                "export-checkpoints.sh",
                head_node_scripts.export_checkpoints_script(spec, run_id, destination=destination, region=REGION),
            )
        )
        if spec.workload.train_retries:
            # A resubmission: its own job name, end record and command (workload.resume)
            last = spec.workload.train_retries + 1
            resubmission = head_node_scripts.submit_script(
                spec, run_id, "train", end_key=END_KEY, config_bucket=CONFIG_BUCKET, attempt=last
            )
            whole.append(("train-submit-last-attempt.sh", resubmission))
        whole.append(("node-states.sh", head_node_scripts.node_states_script(run_id)))
        whole.append(("stop-jobs.sh", head_node_scripts.stop_jobs_script(spec, run_id)))
        for name, text in whole:
            scripts.append(Rendered(f"{variant}/{name}", text, hostile=hostile, excludes=QUOTED_VALUES_EXCLUDES))
            for n, body in enumerate(heredoc_bodies(text) if not name.endswith("-wrapper.sh") else [], 1):
                scripts.append(
                    Rendered(
                        f"{variant}/{name}.heredoc-{n}.bash",
                        body,
                        interpreter="bash",
                        hostile=hostile,
                        excludes=QUOTED_VALUES_EXCLUDES,
                    )
                )
    for os_name in neuron_install.supported_os():
        scripts.append(Rendered(f"neuron/{os_name}.sh", neuron_install.render_script(os_name)))
    scripts += [Rendered(f"local-head-node/{name}", text) for name, text in _local_standins().items()]
    return scripts


def shipped_scripts() -> list[Path]:
    """The shell code trainrun ships as package data (trainrun/scripts/)."""
    return sorted(Path(str(resources.files("trainrun").joinpath("scripts"))).glob("*.sh"))


def _local_standins() -> dict[str, str]:
    """The local head node's stand-ins, as it writes them (with a CLI and an environment, or without)."""
    environment = {"AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL": "http://127.0.0.1:5000"}
    return {
        "amazon-cloudwatch-agent-ctl": slurm_head_node.STANDIN_CWAGENT_CTL,
        "srun": slurm_head_node.srun_standin("/usr/bin/srun"),
        "aws": slurm_head_node.aws_standin("/opt/trainrun/.venv-awscli/bin/aws", environment),
        "aws-missing": slurm_head_node.aws_standin(None, {}),
    }


def heredoc_bodies(script: str) -> list[str]:
    """The body of every heredoc of a head-node script; each is fed to `bash -s`.

    Fails when a script has none (a script that lost its heredoc would otherwise go half
    unchecked) or when one is fed to anything but `bash -s` (its body would need another check).
    """
    bodies: list[str] = []
    lines = iter(script.split("\n"))
    for line in lines:
        match = HEREDOC.fullmatch(line)
        if match is None:
            continue
        # submit_chained (submit-as-root.sh) runs its heredoc with `bash -s` as the user it names.
        if "bash -s" not in match.group("command") and not match.group("command").startswith("submit_chained "):
            raise ValueError(f"a heredoc fed to something other than `bash -s`: {line}")
        body: list[str] = []
        for body_line in lines:
            if body_line == match.group("delimiter"):
                break
            body.append(body_line)
        else:
            raise ValueError(f"the heredoc of {line!r} never ends")
        bodies.append("\n".join(body) + "\n")
    if not bodies:
        raise ValueError("a head-node script with no heredoc: its bash part would go unchecked")
    return bodies


# --- shellcheck -----------------------------------------------------------------------------------


def shellcheck(scripts: list[Rendered], directory: Path) -> subprocess.CompletedProcess[str]:
    """Write `scripts` under `directory` and shellcheck them; the last run's result (rc 0: all clean).

    One shellcheck run per kind of check (shell given or not, hostile or not), each over many files.
    """
    executable = shutil.which("shellcheck")
    if executable is None:
        raise FileNotFoundError("shellcheck is not on PATH (`make shellcheck` installs it)")
    groups: dict[tuple[str | None, tuple[str, ...]], list[str]] = {}
    for script in scripts:
        path = directory / script.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(script.text, encoding="utf-8")
        groups.setdefault((script.interpreter, script.excludes), []).append(script.name)
    output: list[str] = []
    returncode = 0
    for (interpreter, excludes), names in sorted(groups.items(), key=repr):
        argv = [executable, "--norc", *([f"--shell={interpreter}"] if interpreter else [])]
        argv += [f"--exclude={','.join(excludes)}"] if excludes else []
        result = subprocess.run(  # noqa: S603 (a fixed program, our own file names)
            [*argv, "--", *names], cwd=directory, capture_output=True, text=True, check=False
        )
        output.append(result.stdout + result.stderr)
        returncode = returncode or result.returncode
    return subprocess.CompletedProcess(["shellcheck"], returncode, "".join(output), "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keep", type=Path, help="write the rendered scripts here (kept) instead of a temp dir")
    args = parser.parse_args(argv)
    scripts = rendered_scripts()
    with tempfile.TemporaryDirectory(prefix="trainrun-shellcheck-") as temp:
        directory = args.keep or Path(temp)
        result = shellcheck(scripts, directory)
    sys.stdout.write(result.stdout)
    where = f" (in {args.keep})" if args.keep else ""
    verdict = "clean" if result.returncode == 0 else "shellcheck found problems above"
    print(f"shellcheck over {len(scripts)} shipped and rendered scripts{where}: {verdict}")
    return 0 if result.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
