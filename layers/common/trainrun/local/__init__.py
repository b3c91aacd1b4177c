"""The local runtime: emulators and fixtures that stand in for AWS on one machine."""

import os

# moto's EC2 loads its catalogue of public AMIs into every account and region it is asked about
# (a large JSON file parsed each time; a quarter of a unit test's CPU). trainrun never looks an
# image up: the local ParallelCluster launches its nodes from one fixed id, which moto accepts
# without the catalogue. Before any EC2 backend is made, so here: the first local import.
os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")

# Reservation windows (docs/run-file.md): the fixture's reservations start and end in real time,
# minutes away, so the functions get short leads, in real seconds: provisioning begins at a
# block's start (the local cluster is up in seconds, and the emulated EC2 refuses nodes before the
# start), and EC2's 30 minutes of terminations before a capacity block's end become 30 seconds
# (`trainrun local --termination-lead` changes it).
LOCAL_PROVISIONING_LEAD_SECONDS = 0.0
LOCAL_TERMINATION_LEAD_SECONDS = 30.0
