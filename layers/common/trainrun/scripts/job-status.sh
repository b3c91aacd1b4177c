# shellcheck shell=bash
# The head node's job status (bash, as root): prints `TRAINRUN-JOB-STATE slurm_job_id=<id>
# state=<STATE> exit_code=<n>` from accounting, else slurmctld; when neither knows the job, also
# `TRAINRUN-JOB-RECORD <end marker>` from the job's end record on /fsx; while the job is PENDING,
# also the compute nodes it may be waiting for (compute-nodes.sh's queue_state).
# trainrun.logic.head_node_scripts (status_script) renders a header of quoted assignments,
# slurm-job-state.sh and compute-nodes.sh in front of it.
# shellcheck disable=SC2154 # slurm_bin_dir, slurm_job_id and end_record are assigned by that header
set -euo pipefail
# One group, its stdin /dev/null: bash reads all of it before running any of it, and no command in
# it can read (eat) the rest of the script from stdin.
{
PATH="$PATH:$slurm_bin_dir"
export PATH
state=""
code=""
# Accounting: `State|rc:signal`; it fails when accounting storage is disabled.
if out=$(sacct -j "$slurm_job_id" -X --noheader --parsable2 --format=State,ExitCode 2>/dev/null); then
  line=$(printf '%s\n' "$out" | awk 'NF { last = $0 } END { print last }')
  if [ -n "$line" ]; then
    state=${line%%|*}
    state=${state%% *}
    code=${line#*|}
  fi
fi
# slurmctld: `... JobState=COMPLETED ... ExitCode=0:0 ...` while it still remembers the job.
if [ -z "$state" ]; then
  scontrol_state "$slurm_job_id" || state=""
fi
if [[ ! "$state" =~ ^[A-Z_]+$ ]]; then
  state=UNKNOWN
fi
exit_code=-1
if [ "$state" != UNKNOWN ]; then
  exit_code=$(exit_code_of "$code")
fi
printf 'TRAINRUN-JOB-STATE slurm_job_id=%s state=%s exit_code=%s\n' "$slurm_job_id" "$state" "$exit_code"
# Slurm forgot the job: the end watcher's signed record, if there is one (a regular file, read
# with a time limit: the directory is the default user's).
if [ "$state" = UNKNOWN ] && [ -f "$end_record" ] && [ ! -L "$end_record" ]; then
  record=$(timeout 10 head -c 512 -- "$end_record" | head -n 1) || record=""
  if [[ "$record" =~ ^TRAINRUN-END\ [A-Za-z0-9=_\ -]+$ ]]; then
    printf 'TRAINRUN-JOB-RECORD %s\n' "$record"
  fi
fi
# A pending job may wait for nodes that never come up (a failing bootstrap): what Slurm says of them.
if [ "$state" = PENDING ]; then
  queue_state
fi
} </dev/null
