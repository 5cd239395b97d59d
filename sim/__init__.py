"""schedsim: a discrete-event simulator for LLM-serving schedulers."""

__version__ = "0.1.0"
