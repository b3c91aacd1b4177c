# shellcheck shell=sh
# Submit a job, root's part (sh, under SSM): it defines submit_and_watch, which
# trainrun.logic.head_node_scripts (submit_script) calls after it with the default user's part
# (submit-as-user.sh) as a heredoc; a header of quoted assignments goes in front of it.
# shellcheck disable=SC2154 # end_key, end_watcher and (for a chained job) chained_end_key and
# chained_end_watcher are assigned by that header

# submit_and_watch COMMAND...: run COMMAND, the default user's submission (its script on stdin),
# print what it printed and fail as it failed; then start the end watcher of the job it submitted
# or found, as root and in its own session (it outlives this command). The watcher's key is in
# root's environment only: an assignment is no command line (see trainrun.model.end_marker), and
# the default user's part never holds it.
submit_and_watch() {
  rc=0
  submit_output=$("$@") || rc=$?
  printf '%s\n' "$submit_output"
  if [ "$rc" -ne 0 ]; then
    exit "$rc"
  fi
  slurm_job_id=$(printf '%s\n' "$submit_output" | sed -n 's/^TRAINRUN-SUBMITTED job=[a-z]* slurm_job_id=\([0-9][0-9]*\) existing=[a-z]*$/\1/p' | tail -n 1)
  if [ -z "$slurm_job_id" ]; then
    exit 0
  fi
  TRAINRUN_END_KEY=$end_key
  export TRAINRUN_END_KEY
  setsid bash -c "$end_watcher" trainrun-end-watch "$slurm_job_id" </dev/null >/dev/null 2>&1 &
  unset TRAINRUN_END_KEY
  echo TRAINRUN-STEP end-watcher
}

# submit_chained USER: after submit_and_watch, submit the job queued behind the one it submitted
# or found (slurm_job_id, digits only), as USER (its part on stdin, which gets that id as its $1),
# and start that job's end watcher with its own key (chained_end_key, chained_end_watcher). A
# failure is said on stderr and leaves the first job submitted: the workflow submits the second
# itself when its turn comes.
# shellcheck disable=SC2154 # chained_end_key and chained_end_watcher: in a compile submission's header
submit_chained() {
  after=$slurm_job_id
  end_key=$chained_end_key
  end_watcher=$chained_end_watcher
  (submit_and_watch runuser -l "$1" -c "bash -s -- $after") || echo TRAINRUN-STEP chain-failed
}
