"""Throughput of the job log parser on one core.

    python bench/bench_joblog.py [--lines N] [--min-rate R] [--format F]

Builds a reproducible (fixed seed) realistic mix of job output lines in memory — ~60% training
lines (plain and rank-prefixed; in the Neuron samples' format, or `--format` another of
trainrun.logic.job_log.TRAIN_FORMATS, or `all` of them mixed), ~30% noise (pip, torchrun,
Neuron INFO/cache lines, progress bars), compile summaries, checkpoints, a few failures and
blank lines — feeds them to a JobLogSummary, and prints the best lines/second of 3 runs. Exits 1 below the minimum rate.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "layers" / "common"))

from trainrun.logic.job_log import JobLogSummary

SEED = 20230824
DEFAULT_LINES = 1_000_000
MIN_RATE = 200_000

_NOISE = [
    (
        "Requirement already satisfied: torch-neuronx==1.13.1.1.9.0 in"
        " /home/ubuntu/aws_neuron_venv_pytorch/lib/python3.8/site-packages (1.13.1.1.9.0)"
    ),
    "Collecting h5py==3.8.0",
    "  Downloading h5py-3.8.0-cp38-cp38-manylinux_2_17_x86_64.manylinux2014_x86_64.whl (4.7 MB)",
    "WARNING:torch.distributed.run:",
    "*****************************************",
    (
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to"
        " avoid your system being overloaded, please further tune the variable for optimal"
        " performance in your application as needed."
    ),
    "2023-08-24 16:30:11.000123:  161136  INFO ||NEURON_CACHE||: Compile cache path: /var/tmp/neuron-compile-cache",
    (
        "2023-08-24 16:30:12.000456:  161136  INFO ||NEURON_CC_WRAPPER||: Using a cached neff at"
        " /var/tmp/neuron-compile-cache/neuronxcc-2.9.0.40+07376825f/MODULE_10828485584282432342+ab"
        "b26765/model.neff. Exiting with a successfully compiled graph."
    ),
    "2023-Aug-24 16:30:13.0789 161136:161300 INFO  NRT:nrt_init  Neuron Runtime version 2.15.11.0",
    "Reading data file /home/ubuntu/examples_datasets/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128/training.hdf5",
    "Begin epoch 0",
    "Files to process: 500",
    "100%|##########| 1024/1024 [00:03<00:00, 301.53it/s]",
    (
        "Namespace(batch_size=16,"
        " data_dir='~/examples_datasets/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128/',"
        " debug=False, enable_pt_autocast=False, grad_accum_usteps=32, lr=0.0004)"
    ),
    "[0]:Running with WORLD_SIZE=512 and local_rank 0",
    (
        "0:"
        " /home/ubuntu/aws_neuron_venv_pytorch/lib/python3.8/site-packages/torch/utils/data/dataloa"
        "der.py:554: UserWarning: This DataLoader will create 4 worker processes in total."
    ),
]
_COMPILE = [
    "2023-08-22 19:53:37.000212:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Total graphs: 42",
    "2023-08-22 19:53:37.000212:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Total successful compilations: 40",
    "2023-08-22 19:53:37.000212:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Total failed compilations: 2",
    "2022-12-21 00:07:10.000925: INFO ||PARALLEL_COMPILE||: Total graphs: 6",
    "2023-08-22 19:50:01.000111:  12345  INFO ||NEURON_PARALLEL_COMPILE||: worker 0 finished with num of tasks 1....",
    (
        "2023-08-22 19:50:01.000111:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Compiling"
        " /var/tmp/neuron-compile-cache/MODULE_1/model.hlo.pb using following command: neuronx-cc"
        " compile --target=trn1"
    ),
]
_FAILURES = [
    "Traceback (most recent call last):",
    "srun: error: queue1-st-trn1-1: task 3: Exited with exit code 1",
    "2023-Aug-24 16:35:59.0123 12345:12345 ERROR  NRT:nrt_init      Failed to allocate NeuronCores",
    "RuntimeError: Cannot allocate memory",
]
_PREFIXES = ["", "", "[0]:", "0: ", " 0: "]


def _train_line(rng: random.Random, fmt: str, step: int) -> str:
    """One training line in `fmt` (the shapes of tests/fixtures/joblogs' samples)."""
    loss, lr, tp = rng.uniform(1, 11), rng.uniform(1e-6, 4e-4), rng.uniform(1000, 7000)
    if fmt == "hf_trainer":
        return (
            f"{{'loss': {loss:.4f}, 'grad_norm': {rng.uniform(0.1, 5)}, 'learning_rate': {lr}, 'epoch': {step / 1e4}}}"
        )
    if fmt == "progress_bar":
        return (
            f"Epoch 0:  45%|####5     | {step}/1000000 [00:10<00:12, {tp / 1000:.2f}it/s, v_num=0,"
            f" reduced_train_loss={loss:.3f}, lr={lr:.3g}, global_step={step}.0, throughput={tp:.3f}]"
        )
    if fmt == "key_value":
        return f"step {step} loss {loss:.4f} lr {lr:.2e} throughput {tp:.2f}"
    grad = f" grad-norm : {rng.uniform(0.1, 5):.4f}" if rng.random() < 0.3 else " "
    return (
        f"LOG Thu Aug 24 16:35:59 2023 - (0, {step}) step_loss : {loss:.4f} "
        f"learning_rate : {lr:.2e} throughput : {tp:.2f}{grad}"
    )


FORMATS = ("neuron", "hf_trainer", "progress_bar", "key_value")


def build_lines(n: int, seed: int = SEED, fmt: str = "neuron") -> list[str]:
    rng = random.Random(seed)
    lines: list[str] = []
    step = 0
    for _ in range(n):
        r = rng.random()
        if r < 0.60:
            step += 1
            line_format = rng.choice(FORMATS) if fmt == "all" else fmt
            lines.append(f"{rng.choice(_PREFIXES)}{_train_line(rng, line_format, step)}\n")
        elif r < 0.90:
            lines.append(rng.choice(_NOISE) + "\n")
        elif r < 0.95:
            lines.append(rng.choice(_COMPILE) + "\n")
        elif r < 0.97:
            lines.append("Checkpointing..." + "\n" if rng.random() < 0.5 else "Checkpointing done...\n")
        elif r < 0.975:
            lines.append(rng.choice(_FAILURES) + "\n")
        else:
            lines.append("\n")
    lines.append("TRAINRUN-END run=bench-run job=train slurm_job_id=4242 exit_code=0\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=DEFAULT_LINES)
    parser.add_argument("--min-rate", type=float, default=MIN_RATE)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--format", choices=[*FORMATS, "all"], default="neuron")
    args = parser.parse_args(argv)

    lines = build_lines(args.lines, fmt=args.format)
    best = float("inf")
    summary = JobLogSummary()
    for _ in range(args.runs):
        summary = JobLogSummary()
        start = time.perf_counter()
        summary.feed_lines(lines)
        best = min(best, time.perf_counter() - start)
    rate = len(lines) / best
    print(
        f"{len(lines)} lines, best of {args.runs}: {best:.3f}s = {rate:,.0f} lines/s "
        f"(train step {summary.train.step if summary.train else None}, {summary.unparsed_lines} unparsed, "
        f"failures {summary.failures})"
    )
    if rate < args.min_rate:
        print(f"FAIL: below {args.min_rate:,.0f} lines/s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
