# shellcheck shell=bash
# The head node's end watcher of a job (bash, as root: `bash -c <script> trainrun-end-watch <slurm
# job id>`, its end key in TRAINRUN_END_KEY). It waits until slurmctld says the job ended, then
# signs the end marker (trainrun.model.end_marker) and, as the default user, writes it to the job's end
# record on /fsx and appends it to the job's output file (which the CloudWatch agent ships). One
# watcher per Slurm job: a second one exits at once. trainrun.logic.head_node_scripts (end_watcher_script)
# renders a header of quoted assignments and slurm-job-state.sh in front of it.
# shellcheck disable=SC2154 # slurm_bin_dir, run_id, job, run_user, output_file, end_record,
# watchers, running_states and poll_seconds are assigned by that header
set -uo pipefail
# The key stays in this shell's memory: out of the environment of everything it runs.
key=${TRAINRUN_END_KEY:-}
unset TRAINRUN_END_KEY
PATH="$PATH:$slurm_bin_dir"
slurm_job_id=$1
# How many failed asks of slurmctld in a row (restarting, or the job forgotten) to tolerate before
# giving up; the header's poll_seconds is how often it is asked whether the job has ended.
max_misses=150
if [[ ! "$key" =~ ^[0-9a-f]{64}$ ]] || [[ ! "$slurm_job_id" =~ ^[0-9]+$ ]]; then
  exit 2
fi
# root's own directory in the run's (the default user's) directory, for the pid files.
# shellcheck disable=SC2174  # only this last directory is root's (0700); its parents are the run's
mkdir -p -m 0700 -- "$watchers" 2>/dev/null
if [ -L "$watchers" ] || [ ! -O "$watchers" ]; then
  exit 1
fi
pid_file="$watchers/$job-$slurm_job_id.pid"
if [ -f "$pid_file" ] && pid=$(head -c 20 -- "$pid_file") && [[ "$pid" =~ ^[0-9]+$ ]] \
  && [ "$pid" != $$ ] && tr "\0" " " <"/proc/$pid/cmdline" 2>/dev/null | grep -q trainrun-end-watch; then
  exit 0  # this job already has its watcher
fi
echo $$ >"$pid_file"
trap 'rm -f -- "$pid_file"' EXIT

# is_running STATE: whether a job in STATE has not ended yet (it may still run, or run again).
is_running() {
  [[ "$1" =~ ^[A-Z_]+$ ]] || return 1
  case " $running_states " in
    *" $1 "*) return 0 ;;
    *) return 1 ;;
  esac
}

misses=0
while :; do
  if scontrol_state "$slurm_job_id"; then
    misses=0
    if ! is_running "$state"; then
      break
    fi
  else
    misses=$((misses + 1))
    if [ "$misses" -ge "$max_misses" ]; then
      exit 0  # slurmctld does not know the job: the status check decides
    fi
  fi
  sleep "$poll_seconds"
done
exit_code=$(exit_code_of "$code")
text=$(printf 'TRAINRUN-END run=%s job=%s slurm_job_id=%s exit_code=%s state=%s ended_at=%s' \
  "$run_id" "$job" "$slurm_job_id" "$exit_code" "$state" "$(date +%s)")
# python3 for the HMAC; RHEL 8 may only have its platform-python.
python=''
for candidate in python3 /usr/libexec/platform-python; do
  if command -v "$candidate" >/dev/null; then
    python=$candidate
    break
  fi
done
# The key reaches python on stdin (printf is a builtin): never on a command line.
mac=$(printf '%s' "$key" | "$python" -c '
import hashlib, hmac, sys
key = bytes.fromhex(sys.stdin.read().strip())
print(hmac.new(key, sys.argv[1].encode(), hashlib.sha256).hexdigest())
' "$text") || exit 1
line="$text mac=$mac"
# As the default user: root never writes through paths that user owns.
# shellcheck disable=SC2016  # the quoted word is code for another shell (sh, as the default user)
runuser -u "$run_user" -- sh -c 'printf "%s\n" "$1" >"$2.tmp" && mv -f -- "$2.tmp" "$2"; printf "%s\n" "$1" >>"$3"' \
  trainrun-end "$line" "$end_record" "$output_file"
