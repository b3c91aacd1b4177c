"""trainrun: turn one YAML run file into a distributed training run on AWS Trainium."""
