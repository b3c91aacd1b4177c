"""The local runtime: emulators and fixtures that stand in for AWS on one machine."""
