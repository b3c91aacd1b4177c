"""Link data repository: the S3 data repository association at /data; report when AVAILABLE."""

from trainrun.handlers import provisioning_handler
from trainrun.steps.provisioning import link_data_repository

lambda_handler = provisioning_handler(link_data_repository, "fsx")
