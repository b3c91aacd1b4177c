"""IAM for the local runtime: the roles template.yaml defines, evaluated as AWS evaluates them."""
