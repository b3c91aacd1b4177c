# shellcheck shell=bash
# The Neuron SDK's apt side, for Ubuntu (the AWS Neuron setup guide's Ubuntu steps). trainrun
# renders a header of quoted assignments in front of this file and node-configured.sh after it.
# shellcheck disable=SC2154 # ubuntu_codename and the versions are assigned by that header

# cloud-init and unattended-upgrades may hold the dpkg lock while the node boots: wait for it.
apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"
}

neuron_repository() {
  install -m 0755 -d /etc/apt/keyrings
  wget -qO - https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB |
    gpg --batch --yes --dearmor -o /etc/apt/keyrings/neuron.gpg
  printf 'deb [signed-by=/etc/apt/keyrings/neuron.gpg] https://apt.repos.neuron.amazonaws.com %s main\n' \
    "$ubuntu_codename" >/etc/apt/sources.list.d/neuron.list
  apt_get update -y
}

# The interpreter of the shared virtual environment (every node runs it from /home), and a
# compiler for the wheels that build at install time.
install_python() {
  apt_get install -y python3-venv g++
}

# Driver (built against the running kernel), runtime, collectives and tools. EFA is
# ParallelCluster's own: it installs the EFA driver and libfabric on every node itself.
# `=<version>*`, as the Neuron SDK's own install helper pins them (aws-neuron-sdk
# src/helperscripts/n2-helper.py): the repository's versions add the build's commit to the
# release manifest's (<version>-<commit>, but the driver's), so an exact `=<version>` is
# "not found".
install_neuron_packages() {
  apt_get install -y \
    "linux-headers-$(uname -r)" \
    "aws-neuronx-dkms=${aws_neuronx_dkms}*" \
    "aws-neuronx-collectives=${aws_neuronx_collectives}*" \
    "aws-neuronx-runtime-lib=${aws_neuronx_runtime_lib}*" \
    "aws-neuronx-tools=${aws_neuronx_tools}*"
}
