"""schedsim: a discrete-event simulator for LLM-serving schedulers.

The root package is lazy: `import schedsim.policies` or `import schedsim.traces` loads only what
those need, and `schedsim.simulate`, `RunConfig` and `RunResult` are imported on first use.
Importing it installs the compiled core (`schedsim.accel`) before any hot module is imported.

Sub-packages, from the bottom up (each one imports only those below it; the import-linter
contracts in pyproject.toml enforce it):

| package                | owns                                                                 |
|------------------------|----------------------------------------------------------------------|
| `schedsim.policies`    | the step interface, KV block managers, every scheduler policy        |
| `schedsim.traces`      | the Workload table: loaders, generators, transforms, shipped samples |
| `schedsim.backend`     | the real model, Triton kernels, the real executor                    |
| `schedsim.latency`     | GPU step-time models and the CPU-cost model                          |
| `schedsim.engine`      | the engine loop (EngineCore's step / step_with_batch_queue), its waits |
| `schedsim.metrics`     | the recorder the engine reports to, the tables and the summary       |
| `schedsim.worlds`      | what resolves the waits: SimPy world, simulated executor, oracle, real time |
| `schedsim.fastforward` | exact fast-forward over steady decode stretches                       |
| `schedsim.run`         | one run end to end: RunConfig, resolving it, simulate(), run_real()  |
| `schedsim.outputs`     | output folders, plots                                                |
| `schedsim.experiments` | compare, sweep (process pool or Ray), validate against the backend   |
| `schedsim.conformance` | scenario replays diffed against the engines' own schedulers          |
| `schedsim.cli`         | the `schedsim` command                                               |
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from schedsim import accel

accel.install()  # before any hot module is imported: the compiled core, if built from these sources

if TYPE_CHECKING:
    from schedsim.run.config import RunConfig
    from schedsim.run.result import RunResult
    from schedsim.run.simulate import simulate

__version__ = "0.1.0"

__all__ = ["RunConfig", "RunResult", "__version__", "simulate"]

_LAZY = {
    "RunConfig": "schedsim.run.config",
    "RunResult": "schedsim.run.result",
    "simulate": "schedsim.run.simulate",
}


def __getattr__(name: str) -> Any:
    """PEP 562: the public API, imported when first used."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'schedsim' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
