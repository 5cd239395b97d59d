"""schedsim.worlds."""
