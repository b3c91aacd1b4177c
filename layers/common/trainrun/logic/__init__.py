"""Pure domain logic: capacity checks, the cluster config, job log parsing, the scripts the nodes run."""
