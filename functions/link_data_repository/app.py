"""Link data repository: wait for the file system to be AVAILABLE, then the S3 data repository association at /data."""

from trainrun.handlers import provisioning_handler
from trainrun.steps.provisioning import link_data_repository

lambda_handler = provisioning_handler(link_data_repository, "fsx")
