#!/usr/bin/env python3
"""STAND-IN training script for trainrun's local runs (`trainrun local`, `make demo`).

It trains nothing. It prints what the AWS Neuron BERT-large phase-1 pretraining script prints — the
`LOG <time> - (<epoch>, <step>) step_loss : X learning_rate : Y throughput : Z` lines and
`Checkpointing done` — so that the whole control plane (Slurm job, log shipping, progress
handler, task callbacks) runs for real around it. Standard library only.

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


def save_checkpoint(directory: Path, step: int) -> None:
    if os.environ.get("SLURM_PROCID", "0") != "0":
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
        stamp = time.strftime("%a %b %d %H:%M:%S %Y")
        print(
            f"LOG {stamp} - (0, {step}) step_loss : {loss:.4f} learning_rate : {learning_rate:.2e} "
            f"throughput : {throughput:.2f} ",
            flush=True,
        )
        if not graphs_only and step % args.checkpoint_every == 0:
            checkpoint(checkpoints, step)
    return 0


def checkpoint(directory: Path | None, step: int) -> None:
    print("Checkpointing...", flush=True)
    if directory is not None:
        save_checkpoint(directory, step)
    print("Checkpointing done...", flush=True)


if __name__ == "__main__":
    sys.exit(main())
