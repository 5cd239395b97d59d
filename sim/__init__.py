"""schedsim: a discrete-event simulator for LLM-serving schedulers."""

from .config import RunConfig
from .results import RunResult
from .simulate import simulate

__version__ = "0.1.0"

__all__ = ["RunConfig", "RunResult", "__version__", "simulate"]
