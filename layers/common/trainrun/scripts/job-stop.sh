# shellcheck shell=bash
# Stop a job with its grace period (bash, as root): `scancel` without --signal sends the job's
# steps SIGCONT and SIGTERM, waits slurm.conf's KillWait, then sends SIGKILL (scancel(1), NOTES),
# so the workload has KillWait to write its checkpoint. Then wait, up to stop_wait_seconds, for
# slurmctld to say the job has ended; job-status.sh, rendered after this, prints how it ended.
# trainrun.logic.head_node_scripts (stop_script) renders a header of quoted assignments and
# slurm-job-state.sh in front of it.
# shellcheck disable=SC2154 # slurm_bin_dir, slurm_job_id, running_states and stop_wait_seconds are assigned by that header
set -euo pipefail
# One group, its stdin /dev/null: bash reads all of it before running any of it, and no command in
# it can read (eat) the rest of the script from stdin.
{
PATH="$PATH:$slurm_bin_dir"
export PATH
# A job that has already ended cannot be cancelled: that is no error here, its state says so below.
scancel "$slurm_job_id" || echo "scancel $slurm_job_id failed; its state follows" >&2
waited=0
while [ "$waited" -lt "$stop_wait_seconds" ]; do
  # slurmctld no longer knows the job: it ended (and MinJobAge passed).
  scontrol_state "$slurm_job_id" || break
  running=0
  for running_state in "${running_states[@]}"; do
    if [ "$state" = "$running_state" ]; then
      running=1
    fi
  done
  if [ "$running" -eq 0 ]; then
    break
  fi
  sleep 1
  waited=$((waited + 1))
done
} </dev/null
