"""What each Lambda function does, one module per part of the workflow."""
