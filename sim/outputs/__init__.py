"""schedsim.outputs.files."""
