#!/usr/bin/env python3
"""STAND-IN training script for trainrun's local runs (`trainrun local`, `make demo`).

It trains nothing. It prints what the AWS Neuron BERT-large phase-1 pretraining script prints — the
`LOG <time> - (<epoch>, <step>) step_loss : X learning_rate : Y throughput : Z` lines and
`Checkpointing done` — so that the whole control plane (Slurm job, log shipping, progress
handler, task callbacks) runs for real around it; TRAINRUN_LOCAL_LOG_FORMAT makes it print its
progress in another format trainrun reads (docs/run-file.md, Training progress). Standard library only.

Checkpoints are real files: with TRAINRUN_CHECKPOINT_DIR set (trainrun sets it for every job of a
run), each checkpoint is saved there as `step-<N>.json` (by the job's first task only, written to a
temporary name and renamed, as a real trainer must), and a job that finds one resumes after the
latest: a resubmitted job continues from the step of its last checkpoint.

On SIGTERM (what Slurm sends a cancelled job's steps before KillWait's SIGKILL: the budget guard,
`scancel`) it writes a checkpoint, as a real training script's handler would, and exits 143
(128 + SIGTERM): the grace period is rehearsed for real.

Rehearsal knobs (environment, from the run file's workload.env):
  TRAINRUN_LOCAL_STEP_SECONDS   seconds per step (default 0.05)
  TRAINRUN_LOCAL_CRASH_AT_STEP  raise an error at this step, to rehearse a crashing job
  TRAINRUN_LOCAL_LOG_FORMAT     the progress line's format: neuron (default), hf_trainer (Hugging
                                Face Trainer's dict, no step), progress_bar (Lightning's tqdm bar),
                                key_value (`step N loss X lr Y throughput Z`), custom
                                (`it=N obj=X tok/s=Z`: a run's progress_pattern reads it), none
                                (lines without progress)
  TRAINRUN_LOCAL_SAVE_IN_TRIAL  "1": save a checkpoint in neuron_parallel_compile's trial run too,
                                as a script that does not look at NEURON_EXTRACT_GRAPHS_ONLY does
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import time
from pathlib import Path

CHECKPOINT = re.compile(r"step-([0-9]+)\.json")


def latest_checkpoint(directory: Path) -> int:
    """The step of the latest checkpoint in `directory`, 0 when there is none."""
    if not directory.is_dir():
        return 0
    steps = [int(match.group(1)) for match in map(CHECKPOINT.fullmatch, os.listdir(directory)) if match]
    return max(steps, default=0)


def rank() -> int:
    """This process's rank: Slurm's task (SLURM_PROCID), torchrun's (RANK), or, one process per pod
    of an Indexed Job on Kubernetes, the pod's completion index (JOB_COMPLETION_INDEX)."""
    for name in ("SLURM_PROCID", "RANK", "JOB_COMPLETION_INDEX"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def save_checkpoint(directory: Path, step: int) -> None:
    if rank() != 0:
        return  # one writer per job: every task of the job holds the same state
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".step-{step}.json.partial"
    partial.write_text(json.dumps({"step": step}) + "\n")
    partial.rename(directory / f"step-{step}.json")


def main() -> int:
    parser = argparse.ArgumentParser(description="stand-in training script (prints real log formats)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    args = parser.parse_args()
    graphs_only = os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY") == "1"
    steps = min(args.steps, 2) if graphs_only else args.steps
    step_seconds = float(os.environ.get("TRAINRUN_LOCAL_STEP_SECONDS", "0.05"))
    crash_at = int(os.environ.get("TRAINRUN_LOCAL_CRASH_AT_STEP", "0"))
    log_format = os.environ.get("TRAINRUN_LOCAL_LOG_FORMAT", "neuron")
    save_in_trial = os.environ.get("TRAINRUN_LOCAL_SAVE_IN_TRIAL") == "1"
    checkpoints = Path(os.environ["TRAINRUN_CHECKPOINT_DIR"]) if os.environ.get("TRAINRUN_CHECKPOINT_DIR") else None
    # A compile trial run neither reads nor writes checkpoints: it only extracts graphs.
    resumed = latest_checkpoint(checkpoints) if checkpoints and not graphs_only else 0
    print(f"Namespace(batch_size=16, lr=0.0004, seq_len=128, steps_this_run={steps}, warmup_steps=2000)", flush=True)
    if resumed:
        print(f"Resuming from checkpoint {checkpoints / f'step-{resumed}.json'} (step {resumed})", flush=True)
    terminated: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: terminated.append(signum))
    print("Begin epoch 0", flush=True)
    for step in range(resumed + 1, steps + 1):
        time.sleep(step_seconds)
        if terminated:
            print(f"stand-in training: SIGTERM after step {step - 1}: checkpointing, then exiting", file=sys.stderr)
            # A compile trial run saves nothing; nor does a job stopped before it passed its checkpoint.
            checkpoint(None if graphs_only or step - 1 <= resumed else checkpoints, step - 1)
            return 128 + signal.SIGTERM
        if crash_at and step == crash_at:
            raise RuntimeError(f"stand-in training crashed at step {step} (TRAINRUN_LOCAL_CRASH_AT_STEP)")
        # Extracted graphs only (a compile trial run): no real loss, as neuron_parallel_compile's trial run.
        loss = 0.0 if graphs_only else 11.0 * math.exp(-step / 25.0) + 1.5
        learning_rate = 2e-7 * step
        throughput = 1600.0 + 40.0 * math.sin(step / 3.0)
        if log_format != "hf_trainer" or rank() == 0:
            # (the Trainer logs from the main process only: its steps are counted lines)
            print(progress_line(log_format, step, steps, loss, learning_rate, throughput), flush=True)
        if not graphs_only and step % args.checkpoint_every == 0:
            checkpoint(checkpoints, step)
        elif graphs_only and save_in_trial and step == steps:
            checkpoint(checkpoints, step)  # a careless script: trainrun gives the trial a directory of its own
    return 0


def progress_line(log_format: str, step: int, steps: int, loss: float, learning_rate: float, throughput: float) -> str:
    """One step's progress line, in the format the run asked for (each as its source prints it)."""
    if log_format == "hf_trainer":  # transformers' ProgressCallback.on_log: str(logs)
        return str({"loss": round(loss, 4), "grad_norm": 1.25, "learning_rate": learning_rate, "epoch": step / steps})
    if log_format == "progress_bar":  # Lightning's TQDMProgressBar, one epoch of `steps` batches
        percent = int(100 * step / steps)
        return (
            f"Epoch 0: {percent:3d}%|{'#' * (percent // 10):<10}| {step}/{steps} [00:{step:02d}<00:00, "
            f"{throughput:.2f}it/s, v_num=0, train_loss={loss:.3f}]"
        )
    if log_format == "key_value":
        return f"step {step} loss {loss:.4f} lr {learning_rate:.2e} throughput {throughput:.2f}"
    if log_format == "custom":
        return f"it={step} obj={loss:.4f} tok/s={throughput:.1f}"
    if log_format == "none":
        return f"working on batch {step}, all good"
    stamp = time.strftime("%a %b %d %H:%M:%S %Y")
    return (
        f"LOG {stamp} - (0, {step}) step_loss : {loss:.4f} learning_rate : {learning_rate:.2e} "
        f"throughput : {throughput:.2f} "
    )


def checkpoint(directory: Path | None, step: int) -> None:
    print("Checkpointing...", flush=True)
    if directory is not None:
        save_checkpoint(directory, step)
    print("Checkpointing done...", flush=True)


if __name__ == "__main__":
    sys.exit(main())
