#!/usr/bin/env bash
# STAND-IN for aws-neuron-samples' run_dp_bert_large_hf_pretrain_bf16_s128_lamb.sh (trainrun's
# local runs only). Like the real one it runs the training script from the PyTorch Neuron
# virtual environment, which the job must have activated, with 5 steps when
# neuron_parallel_compile extracts graphs (NEURON_EXTRACT_GRAPHS_ONLY) and MAX_STEPS otherwise.
set -o pipefail
# The AWS Neuron PyTorch training container (a pod of trainrun's local Kubernetes stands in for it:
# TRAINRUN_LOCAL_CONTAINER_IMAGE) has it installed system-wide.
in_neuron_container=false
case "${TRAINRUN_LOCAL_CONTAINER_IMAGE:-}" in *pytorch-training-neuronx*) in_neuron_container=true ;; esac
if [ "$in_neuron_container" = false ] && [ "${VIRTUAL_ENV:-}" != "$HOME/aws_neuron_venv_pytorch" ]; then
  echo "ModuleNotFoundError: No module named 'torch_neuronx' (activate ~/aws_neuron_venv_pytorch first)" >&2
  exit 1
fi
MAX_STEPS=${TRAINRUN_LOCAL_STEPS:-40}
steps_this_run=$MAX_STEPS
if [ -n "${NEURON_EXTRACT_GRAPHS_ONLY:-}" ]; then
  steps_this_run=5
fi
OUTPUT_DIR=output
if [ -n "${SLURM_NTASKS:-}" ]; then
  OUTPUT_DIR=output_${SLURM_JOB_ID}
fi
mkdir -p "$OUTPUT_DIR"
python3 dp_bert_large_hf_pretrain_hdf5.py --optimizer LAMB --lr 6e-3 --output_dir "$OUTPUT_DIR" \
  --max_steps "$MAX_STEPS" --steps_this_run "$steps_this_run" --batch_size=16 |& tee "$OUTPUT_DIR/log_ph1_bf16"
exit "${PIPESTATUS[0]}"
