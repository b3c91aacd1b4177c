# shellcheck shell=bash
# The head node's view of the cluster's compute nodes (bash, as root): prints `TRAINRUN-NODES
# total=<n> idle=<n>`, each node counted once (sinfo lists a node once per partition it is in).
# A node is idle when sinfo's short state is exactly `idle`: not `idle~` (powered down), `idle#`
# (powering up), `idle*` (not responding), nor down, drained or allocated.
# Then the queue as compute-nodes.sh's queue_state prints it (nodes not up, with Slurm's reason;
# an INACTIVE partition: ParallelCluster's protected mode).
# trainrun.logic.head_node_scripts (node_states_script) renders a header of quoted assignments and
# compute-nodes.sh in front of it.
# shellcheck disable=SC2154 # slurm_bin_dir is assigned by that header
set -euo pipefail
# One group, its stdin /dev/null: bash reads all of it before running any of it, and no command in
# it can read (eat) the rest of the script from stdin.
{
PATH="$PATH:$slurm_bin_dir"
export PATH
sinfo --noheader --Node --format='%N %t' | awk '
  NF >= 2 && !seen[$1]++ { total++; if ($2 == "idle") idle++ }
  END { printf "TRAINRUN-NODES total=%d idle=%d\n", total, idle }'
queue_state
} </dev/null
