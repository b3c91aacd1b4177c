# shellcheck shell=bash
# Prepare head node, the default user's part (`bash -s` in its login shell): fetch the workload
# (git clone + checkout, or an S3 archive), check its workdir, run workload.setup from there and,
# meanwhile, stage the dataset onto /fsx; then workload.resume_from's checkpoints into the run's
# checkpoint directory; print `TRAINRUN-PREPARED run=<run id>`. Safe to run again: a fetched
# workload is fetched again (git) or kept (S3), a staged dataset is kept. The noisy steps write to
# prepare_log (the dataset's, running beside the others, to prepare-dataset.log next to it); a
# failing step prints its log's last lines to stderr.
# trainrun.logic.head_node_scripts (prepare_script) renders a header of quoted assignments in front
# of it. Its arrays are the commands of the steps, argument by argument (the workload's are fetched
# into partial_dir); an empty one is a step the run does not have (no git clone: the workload is an
# S3 archive; no setup; no dataset).
# shellcheck disable=SC2154 # slurm_bin_dir, aws_region, run_id, run_dir, logs_dir, prepare_log,
# failed_step_tail_lines, workload_dir, partial_dir, workdir, workdir_path, clone_command, source_ref,
# download_command, unpack_command, workload_env, setup_command, dataset_source, dataset_dir,
# dataset_marker, dataset_download_command, dataset_unpack_command, dataset_archive, resume_from,
# checkpoint_dir, checkpoints_marker and checkpoints_download_command are assigned by that header
set -euo pipefail
# One group, its stdin /dev/null: bash reads all of it before running any of it, and no command in
# it can read (eat) the rest of the script from stdin.
{
PATH="$PATH:$slurm_bin_dir"
export PATH
export AWS_DEFAULT_REGION="$aws_region"
mkdir -p -- "$run_dir" "$logs_dir"
: >>"$prepare_log"

# fail MESSAGE: say on stderr why the preparation stops.
fail() {
  printf 'TRAINRUN-ERROR %s\n' "$1" >&2
}

# run_step NAME FUNCTION [LOG]: FUNCTION's output goes to LOG (prepare.log); if it fails, the
# log's tail goes to stderr. The subshell has its own `set -e` (errexit is off in an `if` or `&&` context).
run_step() {
  local name=$1 log=${3:-$prepare_log} rc
  printf 'TRAINRUN-STEP %s\n' "$name"
  printf '\n=== %s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$name" >>"$log"
  set +e
  (set -e; "$2") >>"$log" 2>&1
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then
    printf 'TRAINRUN-ERROR step %s failed with exit code %s; the last lines of %s:\n' "$name" "$rc" "$log" >&2
    tail -n "$failed_step_tail_lines" -- "$log" >&2
    exit "$rc"
  fi
}

# kill_tree PID: PID and every process below it (a background step and the commands it runs).
kill_tree() {
  local child
  for child in $(pgrep -P "$1" || true); do
    kill_tree "$child"
  done
  kill -- "$1" 2>/dev/null || true
}

# checkout_ref DIR REF: detach at REF, taken as a branch of origin, then a tag, then a commit.
checkout_ref() {
  local candidate commit
  for candidate in "refs/remotes/origin/$2" "refs/tags/$2" "$2"; do
    if commit=$(git -C "$1" rev-parse --verify --quiet "$candidate^{commit}"); then
      git -C "$1" checkout --quiet --detach "$commit"
      return 0
    fi
  done
  fail "workload.source.ref: $2 is not a branch, tag or commit of the repository"
  return 1
}

# fetch_workload: the workload into workload_dir, atomically (fetched into partial_dir, then moved).
fetch_workload() {
  if [ "${#clone_command[@]}" -gt 0 ]; then
    fetch_git
  else
    fetch_archive
  fi
}

# fetch_git: clone the repository (at source_ref, or origin's HEAD without one); fetch it again if
# it is already cloned.
fetch_git() {
  if [ -d "$workload_dir/.git" ]; then
    echo "the workload is already cloned in $workload_dir: fetching"
    git -C "$workload_dir" fetch --quiet --tags --force origin
    if [ -n "$source_ref" ]; then
      checkout_ref "$workload_dir" "$source_ref"
    else
      git -C "$workload_dir" checkout --quiet --detach refs/remotes/origin/HEAD
    fi
    return 0
  fi
  if [ -e "$workload_dir" ]; then
    fail "$workload_dir exists and is not a git checkout"
    return 1
  fi
  rm -rf -- "$partial_dir"
  "${clone_command[@]}"
  if [ -n "$source_ref" ]; then
    checkout_ref "$partial_dir" "$source_ref"
  fi
  mv -T -- "$partial_dir" "$workload_dir"
}

# fetch_archive: download the S3 archive and unpack it, once.
fetch_archive() {
  if [ -e "$workload_dir" ]; then
    echo "the workload is already in $workload_dir"
    return 0
  fi
  rm -rf -- "$partial_dir"
  mkdir -p -- "$partial_dir"
  "${download_command[@]}" | "${unpack_command[@]}"
  mv -T -- "$partial_dir" "$workload_dir"
}

check_workdir() {
  if [ ! -d "$workdir_path" ]; then
    fail "workload.workdir: $workdir is not a directory of the workload ($workdir_path)"
    exit 1
  fi
}

# run_setup: workload.setup, from the workdir, with the run's env. env(1) sets the env for the
# setup alone: a name the run sets can change none of this script's variables.
run_setup() {
  cd -- "$workdir_path"
  env -- "${workload_env[@]}" "${setup_command[@]}"
}

# stage_dataset: the dataset onto /fsx once; dataset_marker (named after the source) records it.
stage_dataset() {
  if [ -e "$dataset_marker" ]; then
    printf 'the dataset %s is already staged in %s\n' "$dataset_source" "$dataset_dir"
    return 0
  fi
  mkdir -p -- "$dataset_dir"
  "${dataset_download_command[@]}"
  if [ "${#dataset_unpack_command[@]}" -gt 0 ]; then
    "${dataset_unpack_command[@]}"
    rm -f -- "$dataset_archive"
  fi
  touch -- "$dataset_marker"
}

# stage_checkpoints: workload.resume_from into the checkpoint directory, before the first attempt
# only (checkpoints_marker records it): a later preparation must not overwrite what the run's own
# attempts saved since.
stage_checkpoints() {
  if [ -e "$checkpoints_marker" ]; then
    printf 'the checkpoints of %s are already staged in %s\n' "$resume_from" "$checkpoint_dir"
    return 0
  fi
  mkdir -p -- "$checkpoint_dir"
  "${checkpoints_download_command[@]}"
  if [ -z "$(find "$checkpoint_dir" -type f -print -quit)" ]; then
    fail "workload.resume_from: $resume_from holds no objects; name the prefix a run's summary shows under checkpoints"
    return 1
  fi
  touch -- "$checkpoints_marker"
}

# The dataset is staged while the workload is fetched and set up: neither needs the other, and
# the compute nodes wait for both. Whichever fails first ends the preparation (and the other).
dataset_step=
if [ -n "$dataset_dir" ]; then
  run_step dataset stage_dataset "${prepare_log%.log}-dataset.log" &
  dataset_step=$!
  trap 'kill_tree "$dataset_step"' EXIT
fi
run_step fetch-workload fetch_workload
check_workdir
if [ "${#setup_command[@]}" -gt 0 ]; then
  run_step setup run_setup
fi
if [ -n "$dataset_step" ]; then
  wait "$dataset_step"
  trap - EXIT
fi
if [ -n "$resume_from" ]; then
  run_step checkpoints stage_checkpoints
fi
printf 'TRAINRUN-PREPARED run=%s\n' "$run_id"
} </dev/null
