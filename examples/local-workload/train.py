#!/usr/bin/env python3
"""STAND-IN training script for trainrun's local runs (`trainrun local`, `make demo`).

It trains nothing. It prints what the AWS Neuron BERT-large phase-1 pretraining script prints — the
`LOG <time> - (<epoch>, <step>) step_loss : X learning_rate : Y throughput : Z` lines and
`Checkpointing done` — so that the whole control plane (Slurm job, log shipping, progress
handler, task callbacks) runs for real around it. Standard library only.

On SIGTERM (what Slurm sends a cancelled job's steps before KillWait's SIGKILL: the budget guard,
`scancel`) it writes a checkpoint, as a real training script's handler would, and exits 143
(128 + SIGTERM): the grace period is rehearsed for real.

Rehearsal knobs (environment, from the run file's workload.env):
  TRAINRUN_LOCAL_STEP_SECONDS   seconds per step (default 0.05)
  TRAINRUN_LOCAL_CRASH_AT_STEP  raise an error at this step, to rehearse a crashing job
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description="stand-in training script (prints real log formats)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    args = parser.parse_args()
    graphs_only = os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY") == "1"
    steps = min(args.steps, 2) if graphs_only else args.steps
    step_seconds = float(os.environ.get("TRAINRUN_LOCAL_STEP_SECONDS", "0.05"))
    crash_at = int(os.environ.get("TRAINRUN_LOCAL_CRASH_AT_STEP", "0"))
    print(f"Namespace(batch_size=16, lr=0.0004, seq_len=128, steps_this_run={steps}, warmup_steps=2000)", flush=True)
    terminated: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: terminated.append(signum))
    print("Begin epoch 0", flush=True)
    for step in range(1, steps + 1):
        time.sleep(step_seconds)
        if terminated:
            print(f"stand-in training: SIGTERM after step {step - 1}: checkpointing, then exiting", file=sys.stderr)
            checkpoint()
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
            checkpoint()
    return 0


def checkpoint() -> None:
    print("Checkpointing...", flush=True)
    print("Checkpointing done...", flush=True)


if __name__ == "__main__":
    sys.exit(main())
