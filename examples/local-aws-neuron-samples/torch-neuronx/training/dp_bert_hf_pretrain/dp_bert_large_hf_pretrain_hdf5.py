#!/usr/bin/env python3
"""STAND-IN for aws-neuron-samples' dp_bert_large_hf_pretrain_hdf5.py (trainrun's local runs only).

It trains nothing. It reads its arguments as the real script does, asserts what the real one
asserts about the dataset (the directory exists and holds `*_training_*.hdf5` shards), and
prints what the real one prints on the first node (rank 0): the `LOG <time> - (<epoch>, <step>)
step_loss : X learning_rate : Y throughput : Z` lines and `Checkpointing done...`; nothing while
neuron_parallel_compile extracts graphs. Standard library only.

Rehearsal knob: TRAINRUN_LOCAL_STEP_SECONDS, seconds per step (default 0.05).
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--data_dir",
        type=str,
        default="~/examples_datasets/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128/",
        help="Pre-tokenized HDF5 dataset directory.",
    )
    parser.add_argument("--output_dir", type=str, default="./output")
    parser.add_argument("--optimizer", type=str, default="LAMB")
    parser.add_argument("--lr", type=float, default=4e-4)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--max_steps", type=int, default=28125)
    parser.add_argument("--steps_this_run", type=int, default=-1)
    parser.add_argument("--shards_per_ckpt", type=int, default=1)
    args = parser.parse_args()
    steps = args.max_steps if args.steps_this_run < 0 else args.steps_this_run
    extract_graphs_only = os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY")
    # The first node: Slurm's node id on ParallelCluster, torchrun's node rank (PET_NODE_RANK, from
    # the completion index of trainrun's Indexed Job) on EKS.
    root = os.environ.get("SLURM_NODEID", os.environ.get("PET_NODE_RANK", "0")) == "0"

    data_dir = os.path.expanduser(args.data_dir)
    assert os.path.exists(data_dir), f"ERROR: Data directory {args.data_dir} doesn't exist!"
    files = sorted(glob.glob(data_dir + "/*_training_*.hdf5"))
    assert len(files) > 0, f"ERROR: There are no tokenized dataset shard files in {args.data_dir}"

    if root and not extract_graphs_only:
        print("--------TRAINING CONFIG----------", flush=True)
        print(args, flush=True)
    step_seconds = float(os.environ.get("TRAINRUN_LOCAL_STEP_SECONDS", "0.05"))
    for step in range(1, steps + 1):
        time.sleep(step_seconds)
        if not root or extract_graphs_only:
            continue
        loss = 11.0 * math.exp(-step / 25.0) + 1.5
        throughput = 1600.0 + 40.0 * math.sin(step / 3.0)
        print(
            f"LOG {time.asctime()} - (0, {step}) step_loss : {loss:.4f} "
            f"learning_rate : {2e-7 * step:.2e} throughput : {throughput:.2f} ",
            flush=True,
        )
        if step % 20 == 0 or step == steps:
            print("Checkpointing...", flush=True)
            print("Checkpointing done...", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
