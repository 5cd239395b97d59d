"""schedsim: a discrete-event simulator for LLM-serving schedulers."""

from . import accel

accel.install()  # before any hot module is imported: the compiled core, if built from these sources

from .config import RunConfig  # noqa: E402
from .results import RunResult  # noqa: E402
from .simulate import simulate  # noqa: E402

__version__ = "0.1.0"

__all__ = ["RunConfig", "RunResult", "__version__", "simulate"]
