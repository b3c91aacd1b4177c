# shellcheck shell=sh
# Prepare head node, root's part (sh, under SSM): wait for the file system to be mounted, check
# that the CloudWatch agent is installed, create the run's directories for the default user, and
# have the agent ship the job output files to CloudWatch Logs. trainrun.logic.head_node_scripts
# (prepare_script) renders a header of quoted assignments in front of it, and the default user's
# part (prepare-as-user.sh) after it.
# shellcheck disable=SC2154 # fsx_mount_dir, fsx_mount_wait_seconds, node_configured_marker, cloudwatch_ctl, run_user, run_dir,
# dataset_dir, agent_config_dir, agent_config_file and agent_config are assigned by that header
# (dataset_dir is empty without a dataset)

# This runs while the cluster is still being created: the head node's SSM agent is online before
# ParallelCluster's own configuration of the node has mounted the file system (and configured the
# CloudWatch agent, which it does before mounting shared storage). Until then the mount point is
# absent or an empty directory of the root volume: whatever were written there would be hidden by
# the mount. So wait for the mount itself, for as long as the head node's bootstrap may take.
# Every wait here shares one bound (the head node's bootstrap may take that long in all): look every
# 5 s until the command succeeds, else fail with "<what> after <n> s<why>".
waited=0
wait_until() {
  what=$1 why=$2
  shift 2
  until "$@"; do
    if [ "$waited" -ge "$fsx_mount_wait_seconds" ]; then
      printf 'TRAINRUN-ERROR %s\n' "$what after $waited s$why" >&2
      exit 1
    fi
    sleep 5
    waited=$((waited + 5))
  done
}
wait_until "fsx-not-mounted: $fsx_mount_dir is still not mounted" "; the head node's configuration mounts the file system while the cluster is created (see the cluster's CloudFormation events and /var/log/chef-client.log on the head node)" \
  mountpoint -q -- "$fsx_mount_dir"
echo TRAINRUN-STEP fsx-mounted
# Then for the head node's OnNodeConfigured (ParallelCluster runs it after the mounts): it builds or
# restores the PyTorch Neuron environment in the default user's home that the workload's setup
# activates, and writes the marker last. No marker to wait for with a stack's own node script.
node_configured() { [ -z "$node_configured_marker" ] || [ -f "$node_configured_marker" ]; }
wait_until "node-not-configured: the head node's OnNodeConfigured has not finished" " ($node_configured_marker is missing); it installs the Neuron environment the workload's setup uses (see /var/log/cloud-init-output.log and /var/log/chef-client.log on the head node)" \
  node_configured
echo TRAINRUN-STEP node-configured
if [ ! -x "$cloudwatch_ctl" ]; then
  printf 'TRAINRUN-ERROR %s\n' "cloudwatch-agent-missing: $cloudwatch_ctl is not installed on the head node; without the CloudWatch agent the job output never reaches CloudWatch Logs and the run's progress cannot be followed" >&2
  exit 1
fi
# The run's directories, created by root (the file system's root is root's) for the default user.
user_dir() {
  if [ ! -d "$1" ]; then
    mkdir -p -- "$1"
    chown -- "$run_user:" "$1"
  fi
}
user_dir "$run_dir"
if [ -n "$dataset_dir" ]; then
  user_dir "$dataset_dir"
fi
# Ship the job output files to CloudWatch Logs.
mkdir -p -- "$agent_config_dir"
printf '%s\n' "$agent_config" >"$agent_config_file"
if ! agent_output=$("$cloudwatch_ctl" -a append-config -m ec2 -s -c "file:$agent_config_file" 2>&1)
then
  printf '%s\n' "$agent_output" >&2
  printf 'TRAINRUN-ERROR %s\n' "cloudwatch-agent-config: the CloudWatch agent refused $agent_config_file" >&2
  exit 1
fi
echo TRAINRUN-STEP cloudwatch-agent
