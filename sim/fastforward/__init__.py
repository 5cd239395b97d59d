"""schedsim.fastforward.stretch."""
