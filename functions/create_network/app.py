"""Create network: build (or adopt) the run's network; report when its NAT gateway is available."""

from trainrun.handlers import provisioning_handler
from trainrun.steps.provisioning import create_network

lambda_handler = provisioning_handler(create_network, "ec2")
