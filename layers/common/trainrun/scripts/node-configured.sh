# shellcheck shell=bash
# What a node of the cluster does once ParallelCluster has configured it (OnNodeConfigured, run
# as root with the node's kind as its argument): the Neuron SDK from the Neuron repositories.
# The functions come from neuron-apt.sh; the variables from the rendered header.
# shellcheck disable=SC2154 # default_user, python and the versions are assigned by that header
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
venv="/home/${default_user}/aws_neuron_venv_pytorch"

echo "trainrun: installing Neuron ${neuron_release} on this ${node_type} (${os_name})"
neuron_repository
install_python
if [ "$node_type" = ComputeFleet ]; then
  install_neuron_packages
else
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --upgrade pip
  # Later installs into the environment (a workload's requirements) find Neuron's wheels too.
  "$venv/bin/python" -m pip config --site set global.extra-index-url "$neuron_pip_index"
  "$venv/bin/python" -m pip install --extra-index-url "$neuron_pip_index" \
    "neuronx-cc==${neuronx_cc}" "torch-neuronx==${torch_neuronx}"
  chown -R "${default_user}:" "$venv"
fi
echo "trainrun: Neuron ${neuron_release} installed"
