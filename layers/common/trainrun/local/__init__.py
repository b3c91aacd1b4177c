"""The local runtime: emulators and fixtures that stand in for AWS on one machine."""

# Reservation windows (docs/run-file.md): the fixture's reservations start and end in real time,
# minutes away, so the functions get short leads, in real seconds: provisioning begins at a
# block's start (the local cluster is up in seconds, and the emulated EC2 refuses nodes before the
# start), and EC2's 30 minutes of terminations before a capacity block's end become 30 seconds
# (`trainrun local --termination-lead` changes it).
LOCAL_PROVISIONING_LEAD_SECONDS = 0.0
LOCAL_TERMINATION_LEAD_SECONDS = 30.0
