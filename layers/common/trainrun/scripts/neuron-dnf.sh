# shellcheck shell=bash
# The Neuron SDK's yum side, for Amazon Linux 2023, RHEL and Rocky Linux (the AWS Neuron setup
# guide's Amazon Linux steps; dnf on every one of them). trainrun renders a header of quoted
# assignments in front of this file and node-configured.sh after it.
# shellcheck disable=SC2154 # python and the versions are assigned by that header

neuron_repository() {
  install -m 0755 -d /etc/yum.repos.d
  cat >/etc/yum.repos.d/neuron.repo <<'REPO'
[neuron]
name=Neuron YUM Repository
baseurl=https://yum.repos.neuron.amazonaws.com
enabled=1
metadata_expire=0
gpgcheck=1
gpgkey=https://yum.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB
REPO
  rpm --import https://yum.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB
}

# The interpreter of the shared virtual environment (every node runs it from /home): the
# pinned Neuron release takes Python 3.10 to 3.12, newer than these systems' default python3.
install_python() {
  dnf install -y "$python" gcc-c++
}

# Driver (built against the running kernel), runtime, collectives and tools. EFA is
# ParallelCluster's own: it installs the EFA driver and libfabric on every node itself.
# `-<version>*`, as the Neuron SDK's own install helper pins them (aws-neuron-sdk
# src/helperscripts/n2-helper.py): the repository's versions add the build's commit to the
# release manifest's (<version>_<commit>-1, but the driver's), so an exact `-<version>`
# matches nothing.
install_neuron_packages() {
  dnf install -y \
    "kernel-devel-$(uname -r)" \
    "kernel-headers-$(uname -r)" \
    "aws-neuronx-dkms-${aws_neuronx_dkms}*" \
    "aws-neuronx-collectives-${aws_neuronx_collectives}*" \
    "aws-neuronx-runtime-lib-${aws_neuronx_runtime_lib}*" \
    "aws-neuronx-tools-${aws_neuronx_tools}*"
}
