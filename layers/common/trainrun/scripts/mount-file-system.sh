#!/bin/bash
# trainrun: mount the run's FSx for Lustre file system on a node of the cluster (OnNodeConfigured,
# the first script of the sequence, run as root on the head node and on every compute node).
#
# Usage: mount-file-system.sh DNS_NAME MOUNT_NAME MOUNT_DIR WAIT_SECONDS
#
# The cluster is created while the file system is still CREATING (ParallelCluster's own
# SharedStorage accepts only an AVAILABLE file system: it reads its network interfaces when it
# validates the config), so this script mounts it instead, with the command of the Amazon FSx for
# Lustre User Guide ("Mounting Amazon FSx file systems": mount -t lustre -o relatime,flock
# DNS_NAME@tcp:/MOUNT_NAME MOUNT_DIR; the Lustre client comes with ParallelCluster's images). A
# mount refused while the file system is not yet AVAILABLE is tried again every RETRY_SECONDS,
# for WAIT_SECONDS at most, which stays inside ParallelCluster's node bootstrap timeout; then the
# script fails with mount's last error, and so does the node's configuration. Safe to run twice: a
# MOUNT_DIR already mounted is left as it is. The fstab line mounts it again after a reboot.
set -euo pipefail

RETRY_SECONDS=5

if [ "$#" -ne 4 ]; then
  echo "usage: $0 DNS_NAME MOUNT_NAME MOUNT_DIR WAIT_SECONDS" >&2
  exit 2
fi
dns_name=$1
mount_name=$2
mount_dir=$3
wait_seconds=$4
device="${dns_name}@tcp:/${mount_name}"

if mountpoint -q -- "$mount_dir"; then
  echo "trainrun: $mount_dir is mounted already"
  exit 0
fi
mkdir -p -- "$mount_dir"
waited=0
until error=$(mount -t lustre -o relatime,flock "$device" "$mount_dir" 2>&1); do
  if [ "$waited" -ge "$wait_seconds" ]; then
    echo "trainrun: could not mount $device at $mount_dir in ${wait_seconds}s: $error" >&2
    exit 1
  fi
  echo "trainrun: $device is not mountable yet (${waited}s): $error"
  sleep "$RETRY_SECONDS"
  waited=$((waited + RETRY_SECONDS))
done
if ! grep -qsF -- "$device $mount_dir " /etc/fstab; then
  echo "$device $mount_dir lustre defaults,relatime,flock,_netdev 0 0" >>/etc/fstab
fi
echo "trainrun: mounted $device at $mount_dir"
