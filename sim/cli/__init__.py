"""schedsim.cli.main."""
