"""What a run is made of: the run file, the run record, its jobs, findings, tags and events."""
