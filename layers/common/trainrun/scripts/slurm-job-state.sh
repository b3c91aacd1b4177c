# shellcheck shell=bash
# Slurm's word on a job, for the head node's job status script (job-status.sh) and end watcher
# (end-watcher.sh): trainrun.logic.head_node_scripts puts these functions in front of either.

# scontrol_state ID: set `state` and `code` (rc:signal) from what slurmctld says of the job; fails
# when slurmctld does not know it (a finished job is forgotten after MinJobAge).
# shellcheck disable=SC2034 # state and code are its answers, read by the script that calls it
scontrol_state() {
  local out field fields
  out=$(scontrol show job -o "$1" 2>/dev/null) || return 1
  state="" code=""
  read -r -a fields <<<"$out"
  for field in "${fields[@]}"; do
    case "$field" in
      JobState=*) state=${field#JobState=} ;;
      ExitCode=*) code=${field#ExitCode=} ;;
    esac
  done
  [[ "$state" =~ ^[A-Z_]+$ ]]
}

# exit_code_of CODE: the exit code of a job whose ExitCode is CODE (rc:signal): 128 + the signal
# when a signal ended it, -1 when unknown.
exit_code_of() {
  local rc=${1%%:*} signal=${1#*:}
  if [[ ! "$rc" =~ ^[0-9]+$ ]]; then
    echo -1
  elif [[ "$signal" =~ ^[0-9]+$ ]] && [ "$signal" -gt 0 ]; then
    echo $((128 + 10#$signal))
  else
    echo $((10#$rc))
  fi
}
