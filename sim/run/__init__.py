"""schedsim.run."""
