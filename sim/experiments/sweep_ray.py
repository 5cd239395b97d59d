"""Ray engine for `schedsim sweep --engine ray`: the same worker body, scheduled on a Ray cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any


def execute_ray(
    simulate_one: Callable[[Any], dict[str, Any]], pending: Sequence[Any], workers: int
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Yield (run, simulate_one(run.config)) as Ray tasks finish; joins a running cluster or starts
    a local one."""
    try:
        import ray  # optional heavy dependency: the `ray` extra
    except ImportError:
        raise RuntimeError("schedsim sweep --engine ray needs Ray: pip install 'schedsim[ray]'") from None

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
