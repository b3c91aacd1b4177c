# shellcheck shell=bash
# The sbatch script of a job: `srun` of the job's command on every node, from the workload's
# workdir, with the run's env; it exits with the command's exit code (no `set -e`). It prints no
# end marker: it runs as the default user, like the workload, so nothing it printed could be
# trusted; the head node's end watcher reports the end (trainrun.model.end_marker).
# trainrun.logic.head_node_scripts (wrapper_script) renders a shebang and a header of quoted
# assignments in front of it; srun_command is the srun command line, argument by argument.
# shellcheck disable=SC2154 # workdir_path, checkpoint_dir, attempt, workload_env and srun_command are assigned by that header
set -uo pipefail
code=0
cd -- "$workdir_path" || code=$?
# The run's checkpoint directory, on the shared file system: the same for every attempt of the
# train job, so a resubmitted job finds what the one before it saved (the compile job's is its
# own, so that its trial run's saves are never resumed from nor exported). TRAINRUN_ATTEMPT says which
# submission this is (1, then 2, 3, ... for resubmissions after an infrastructure failure).
if [ "$code" -eq 0 ]; then
  mkdir -p -- "$checkpoint_dir" || code=$?
fi
if [ "$code" -eq 0 ]; then
  # env(1) sets the run's env for the job alone: a name the run sets can change none of this
  # script's variables (and TRAINRUN_* names are not a run's to set: trainrun.model.run_file).
  env -- "TRAINRUN_CHECKPOINT_DIR=$checkpoint_dir" "TRAINRUN_ATTEMPT=$attempt" "${workload_env[@]}" "${srun_command[@]}" || code=$?
fi
exit "$code"
