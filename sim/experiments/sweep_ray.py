"""Ray engine for `schedsim sweep --engine ray`: the same worker body, scheduled on a Ray cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from schedsim.run.toml_config import ConfigError


def require_ray() -> Any:
    """The ray module (the `ray` extra), or a ConfigError saying how to get it."""
    try:
        import ray  # optional heavy dependency
    except ImportError:
        raise ConfigError(
            "engine 'ray' needs Ray: pip install 'schedsim[ray]' (the default engine, a local "
            "process pool, needs nothing)"
        ) from None
    return ray


def execute_ray(
    simulate_one: Callable[[Any], dict[str, Any]], pending: Sequence[Any], workers: int
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Yield (run, simulate_one(run.config)) as Ray tasks finish; joins a running cluster or starts
    a local one."""
    ray = require_ray()
    started = False
    if not ray.is_initialized():
        ray.init(num_cpus=max(workers, 1), include_dashboard=False, log_to_driver=False)
        started = True
    try:
        task = ray.remote(num_cpus=1)(simulate_one)
        refs = {task.remote(run.config): run for run in pending}  # one CPU each
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            for ref in ready:
                yield refs[ref], ray.get(ref)
    finally:
        if started:
            ray.shutdown()
