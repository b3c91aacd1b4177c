# shellcheck shell=bash
# The compute nodes as Slurm sees them, for the head node's job status (job-status.sh, while a job
# is PENDING) and node states (node-states.sh): trainrun.logic.head_node_scripts puts this function
# in front of either.

# queue_state: print `TRAINRUN-QUEUE nodes=<n> up=<n> inactive=<n>` (inactive: partitions that no
# longer schedule, as ParallelCluster's protected mode leaves them: sinfo's `inactive`, `inact` in
# older Slurm) and `TRAINRUN-NODE-DOWN name=<node> state=<sinfo state> reason=<Slurm's reason>` for
# the first 10 nodes that are not up, each node counted once (sinfo lists a node once per partition).
# A node is up when sinfo's short state is one of Slurm's working states without a flag (not `idle~`
# powered down, `idle#` powering up, `down*` not responding, drain, fail, ...). sinfo failing
# (slurmctld busy) prints nothing: the caller's answer stands without it.
queue_state() {
  local inactive
  inactive=$(sinfo --noheader --format='%R %a' | awk '$2 ~ /^inact/ { n++ } END { print n + 0 }') || return 0
  sinfo --noheader --Node --format='%N|%t|%E' | awk -F'|' -v inactive="$inactive" -v most=10 '
    !seen[$1]++ {
      total++
      if ($2 ~ /^(idle|alloc|mix|comp)$/) { up++; next }
      if (shown++ < most) {
        reason = substr($0, length($1) + length($2) + 3)
        gsub(/[^[:print:]]/, " ", reason)
        down[shown] = sprintf("TRAINRUN-NODE-DOWN name=%s state=%s reason=%s", $1, $2, substr(reason, 1, 300))
      }
    }
    END {
      printf "TRAINRUN-QUEUE nodes=%d up=%d inactive=%d\n", total, up, inactive
      for (i = 1; i <= shown && i <= most; i++) print down[i]
    }' || true
}
