# shellcheck shell=bash
# Submit a job, the default user's part (`bash -s` in its login shell): sbatch the job's wrapper,
# unless Slurm already knows a job of that name; print `TRAINRUN-SUBMITTED job=<job>
# slurm_job_id=<id> existing=<true|false>`. A job of the same name is looked for in the queue
# (squeue), then in accounting (sacct, when it is enabled), then in the jobs slurmctld still
# remembers (scontrol); when squeue itself fails the script fails rather than risk a second job.
# trainrun.logic.head_node_scripts (submit_script) renders a header of quoted assignments in front
# of it: wrapper_script is the whole sbatch wrapper (job-wrapper.sh, with its header), written to
# wrapper; sbatch_command is the sbatch command line, argument by argument. Its $1, when given, is
# the Slurm job id of the job this one is queued behind (submit_chained in submit-as-root.sh).
# shellcheck disable=SC2154 # slurm_bin_dir, job, job_name, workdir_path, sacct_lookback, logs_dir,
# wrapper, wrapper_script and sbatch_command are assigned by that header
set -euo pipefail
after=${1:-}
# One group, its stdin /dev/null: bash reads all of it before running any of it, and no command in
# it can read (eat) the rest of the script from stdin.
{
PATH="$PATH:$slurm_bin_dir"
export PATH
cd -- "$workdir_path"

# fail MESSAGE: say on stderr why the submission stops.
fail() {
  printf 'TRAINRUN-ERROR %s\n' "$1" >&2
}

# The first/last plain job id of some lines (array or step ids are not ours).
first_id() { awk '/^[0-9]+$/ { print; exit }'; }
last_id() { awk '/^[0-9]+$/ { last = $0 } END { if (last != "") print last }'; }

if ! queued=$(squeue --noheader --name="$job_name" --format=%i); then
  fail "squeue failed: not submitting $job_name without knowing if it is queued"
  exit 1
fi
existing=$(printf '%s\n' "$queued" | first_id)
if [ -z "$existing" ]; then
  # Finished jobs: accounting if it is enabled (it fails when it is not).
  finished=$(sacct --noheader -X --parsable2 --starttime="$sacct_lookback" --name="$job_name" --format=JobID 2>/dev/null) || finished=""
  existing=$(printf '%s\n' "$finished" | last_id)
fi
if [ -z "$existing" ]; then
  # Finished jobs slurmctld still remembers (MinJobAge).
  known=$(scontrol show job -o 2>/dev/null) || known=""
  existing=$(printf '%s\n' "$known" | JOB_NAME="$job_name" awk '
    { id = ""; hit = 0
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^JobId=/) id = substr($i, 7)
        if ($i == "JobName=" ENVIRON["JOB_NAME"]) hit = 1
      }
      if (hit && id ~ /^[0-9]+$/) last = id }
    END { if (last != "") print last }')
fi
if [ -n "$existing" ]; then
  printf 'TRAINRUN-SUBMITTED job=%s slurm_job_id=%s existing=true\n' "$job" "$existing"
  exit 0
fi

mkdir -p -- "$logs_dir"
printf '%s' "$wrapper_script" >"$wrapper.tmp"
chmod 0755 -- "$wrapper.tmp"
mv -f -- "$wrapper.tmp" "$wrapper"
if [ -n "$after" ]; then
  if [[ ! "$after" =~ ^[0-9]+$ ]]; then
    fail "$after is not a Slurm job id to queue $job_name behind"
    exit 1
  fi
  # Starts the moment that job ends with exit code 0; Slurm cancels it (DependencyNeverSatisfied)
  # when that job fails or is cancelled, so it never runs after a failed one (sbatch(1), --dependency
  # afterok, --kill-on-invalid-dep).
  sbatch_command=("${sbatch_command[0]}" "--dependency=afterok:$after" --kill-on-invalid-dep=yes "${sbatch_command[@]:1}")
fi
submitted=$("${sbatch_command[@]}")
slurm_job_id=${submitted%%;*}
case "$slurm_job_id" in
  '' | *[!0-9]*)
    fail "sbatch printed $submitted, not a job id"
    exit 1
    ;;
esac
printf 'TRAINRUN-SUBMITTED job=%s slurm_job_id=%s existing=false\n' "$job" "$slurm_job_id"
} </dev/null
