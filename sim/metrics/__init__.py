"""schedsim.metrics.recorder."""
