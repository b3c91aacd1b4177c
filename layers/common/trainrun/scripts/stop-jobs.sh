# shellcheck shell=bash
# Stop a run's jobs on a cluster that stays up (bash, as root): a run on a kept cluster
# (cluster.reuse) does not delete the cluster at its teardown, so nothing else would stop a job it
# leaves running (cancelled, or past max_runtime). Cancels every job of the run's job names, then
# prints `TRAINRUN-JOBS-STOPPED run=<run id>` once none of them is pending or running any more.
# trainrun.logic.head_node_scripts (stop_jobs_script) renders a header of quoted assignments in front of it.
# shellcheck disable=SC2154 # slurm_bin_dir, run_id and job_names are assigned by that header
set -euo pipefail
# One group, its stdin /dev/null: bash reads all of it before running any of it, and no command in
# it can read (eat) the rest of the script from stdin.
{
PATH="$PATH:$slurm_bin_dir"
export PATH
# scancel takes one name, and cancels only the jobs of that name Slurm still has (none: nothing to do).
for name in "${job_names[@]}"; do
  scancel --name="$name"
done
names=$(IFS=,; printf '%s' "${job_names[*]}")
# A cancelled job is COMPLETING (CG) while its processes end: what must be gone is PENDING and RUNNING.
left=$(squeue --noheader --states=PENDING,RUNNING,CONFIGURING --name="$names" --format=%i)
if [ -n "$left" ]; then
  printf 'TRAINRUN-ERROR jobs of run %s still pending or running after scancel: %s\n' "$run_id" "${left//$'\n'/ }" >&2
  exit 1
fi
printf 'TRAINRUN-JOBS-STOPPED run=%s\n' "$run_id"
} </dev/null
