# shellcheck shell=bash
# What a node of the cluster does once ParallelCluster has configured it (OnNodeConfigured, run
# as root with the node's kind as its argument): the Neuron SDK from the Neuron repositories.
# The functions come from neuron-apt.sh; the variables from the rendered header.
# shellcheck disable=SC2154 # default_user, python, venv_store, venv_address, configured_marker and the versions are assigned by that header
set -euo pipefail

node_type=${1:-}
case "$node_type" in
  HeadNode | ComputeFleet) ;;
  *)
    echo "usage: $0 HeadNode|ComputeFleet (got '${node_type}')" >&2
    exit 2
    ;;
esac

neuron_pip_index=https://pip.repos.neuron.amazonaws.com
# The PyTorch Neuron virtual environment the Neuron training tutorials activate. It lives in the
# default user's home, which the head node exports to every compute node, so it is built once.
venv_name=aws_neuron_venv_pytorch
venv="/home/${default_user}/${venv_name}"
# What an archive of the environment says it is: its content address (trainrun.logic.neuron_install).
address_file=.trainrun-venv-address

# build_venv: the environment, from the Neuron pip repository (minutes: pip resolves and unpacks
# torch-neuronx, neuronx-cc and their dependencies).
build_venv() {
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --upgrade pip
  # Later installs into the environment (a workload's requirements) find Neuron's wheels too.
  "$venv/bin/python" -m pip config --site set global.extra-index-url "$neuron_pip_index"
  "$venv/bin/python" -m pip install --extra-index-url "$neuron_pip_index" \
    "neuronx-cc==${neuronx_cc}" "torch-neuronx==${torch_neuronx}"
  printf '%s\n' "$venv_address" >"$venv/$address_file"
}

# restore_venv ARCHIVE: the environment a previous cluster of the stack built, from ARCHIVE (its
# content address in the config bucket), in the seconds a download takes instead of pip's minutes.
# The head node's OnNodeConfigured delays ParallelCluster's clustermgtd, hence every compute node.
# Fails (and leaves nothing) when there is no archive, it does not unpack, or it is not the
# environment this address names (its address file says another or nothing): that is rebuilt,
# never trusted. Unpacked beside the environment's path and moved there: a venv is not relocatable.
restore_venv() {
  local staging="${venv}.restoring"
  rm -rf -- "$staging"
  mkdir -p -- "$staging"
  if ! aws s3 cp --quiet "$1" - | tar -x --no-same-owner -f - -C "$staging"; then
    echo "trainrun: no Neuron environment to reuse at $1: building it"
  elif [ "$(cat -- "$staging/$venv_name/$address_file" 2>/dev/null)" != "$venv_address" ]; then
    echo "trainrun: $1 is not the environment of address $venv_address: building it"
  else
    rm -rf -- "$venv"
    mv -T -- "$staging/$venv_name" "$venv"
    rm -rf -- "$staging"
    echo "trainrun: reused the Neuron environment $1"
    return 0
  fi
  rm -rf -- "$staging"
  return 1
}

# save_venv ARCHIVE: the built environment to ARCHIVE, for the stack's next clusters. A failed
# upload costs the next cluster a build, not this one its node: it is reported, not fatal.
save_venv() {
  local archive
  archive=$(mktemp)
  if tar -cf "$archive" -C "$(dirname -- "$venv")" "$venv_name" && aws s3 cp --quiet "$archive" "$1"; then
    echo "trainrun: saved the Neuron environment to $1"
  else
    echo "trainrun: could not save the Neuron environment to $1; the next cluster builds it again" >&2
  fi
  rm -f -- "$archive"
}

echo "trainrun: installing Neuron ${neuron_release} on this ${node_type} (${os_name})"
neuron_repository
install_python
if [ "$node_type" = ComputeFleet ]; then
  install_neuron_packages
elif [ -z "$venv_store" ]; then
  build_venv
  chown -R "${default_user}:" "$venv"
else
  # The interpreter's exact version is part of the archive's name: a venv runs the interpreter
  # it was built with, and an AMI with another Python gets its own.
  python_version=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
  archive="${venv_store}${venv_name}-python${python_version}.tar"
  if ! restore_venv "$archive"; then
    build_venv
    save_venv "$archive"
  fi
  chown -R "${default_user}:" "$venv"
fi
echo "trainrun: Neuron ${neuron_release} installed"
# The head node is configured: Prepare head node, which runs while the cluster is created, waits
# for this file before it runs the workload's setup in the environment above. Written last and
# renamed into place, so that it never exists before the environment does.
if [ "$node_type" = HeadNode ]; then
  mkdir -p -- "$(dirname -- "$configured_marker")"
  printf '%s\n' "$venv_address" >"${configured_marker}.tmp"
  mv -f -- "${configured_marker}.tmp" "$configured_marker"
fi
