"""Create file system: request FSx for Lustre for the run (or check the existing one it names)."""

from trainrun.handlers import provisioning_handler
from trainrun.steps.provisioning import create_file_system

lambda_handler = provisioning_handler(create_file_system, "fsx")
