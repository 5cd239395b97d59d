"""schedsim.engine.loop."""
