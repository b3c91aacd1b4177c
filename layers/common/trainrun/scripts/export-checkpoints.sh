# shellcheck shell=bash
# Tear down, before the cluster goes: copy the run's checkpoint directory to S3 (`bash -s` in the
# default user's login shell, with the head node's instance role, which may write that prefix
# only: trainrun.logic.cluster_config). Prints `TRAINRUN-CHECKPOINTS none` when there is nothing
# to copy, else `TRAINRUN-CHECKPOINTS exported files=<n>`; a failed copy prints its last lines to
# stderr. trainrun.logic.head_node_scripts (export_checkpoints_script) renders a header of quoted
# assignments in front of it.
# shellcheck disable=SC2154 # aws_region, checkpoint_dir and destination are assigned by that header
set -euo pipefail
{
export AWS_DEFAULT_REGION="$aws_region"
if [ ! -d "$checkpoint_dir" ] || [ -z "$(find "$checkpoint_dir" -type f -print -quit)" ]; then
  echo "TRAINRUN-CHECKPOINTS none"
  exit 0
fi
# cp, not sync: sync lists the destination first, which needs s3:ListBucket on the whole bucket;
# the role may only put objects under the run's prefix. Putting the same files again is harmless.
if ! output=$(aws s3 cp --recursive --no-progress "$checkpoint_dir" "$destination" 2>&1); then
  printf '%s\n' "$output" | tail -n 20 >&2
  printf 'TRAINRUN-ERROR %s\n' "checkpoint-export: aws s3 cp --recursive $checkpoint_dir $destination failed" >&2
  exit 1
fi
# What was copied, one "upload: <file> to <s3 URL>" line each: a job of a cancelled run may still
# write a checkpoint while the copy runs (its nodes stop with the fleet or the cluster), so the
# files counted before the copy need not be the files it put.
files=$(printf '%s\n' "$output" | grep -c '^upload: ' || true)
printf 'TRAINRUN-CHECKPOINTS exported files=%s\n' "$((files))"
} </dev/null
