"""schedsim.experiments."""
