"""A second process for `schedsim run`'s plots: it imports matplotlib while the simulation runs.

The simulation is one busy core; on a machine with two, the other sits idle until the plots
render, and then matplotlib's import (~0.6 s) and three figures (~0.7 s each) run one after the
other. The worker is spawned (not forked: the parent holds threads and a compiled core) before
the simulation starts, imports `schedsim.outputs.plots` and renders a small figure to warm the font and
Agg caches; afterwards it renders the batch/KV and busy-timeline figures from the columns they
read while the parent writes the tables and renders the latency figure. Any failure of the worker
(it could not start, it died) falls back to rendering in the parent: the files are the same.
"""

from __future__ import annotations

import atexit
import io
import multiprocessing
import os
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from schedsim.outputs.figures import WORKER_COLUMNS
from schedsim.run.signals import sigint_ignored


def _warm() -> None:
    """The worker's start: the plotting imports and one small figure, off the parent's core."""
    from matplotlib.figure import Figure  # the worker exists to import matplotlib off this core
    from schedsim.outputs import plots  # noqa: F401 (the import is the point)

    fig = Figure(figsize=(2, 2), layout="constrained")
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], label="warm")
    ax.legend()
    ax.set(title="warm", xlabel="x", ylabel="y")
    fig.savefig(io.BytesIO(), format="png", dpi=50)
    atexit.register(_exit_now)


def _exit_now() -> None:
    """The worker's exit once its figures are written: skip tearing down matplotlib and pandas
    (~0.25 s the parent would wait for; nothing is left to flush but the standard streams)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _ping() -> int:
    """A no-op job: submitting it starts the worker process now, not at the first plot."""
    return os.getpid()


def _render(func: str, frame: Any, path: str) -> str:
    """One figure in the worker, by the plotting function's name."""
    from schedsim.outputs import plots

    getattr(plots, func)(frame, Path(path))
    return path


class PlotWorker:
    """The spawned plotting process; `render` hands it a figure, `close` shuts it down."""

    def __init__(self) -> None:
        """Spawn the process and start its warm-up at once (it runs while the parent simulates)."""
        before = set(multiprocessing.active_children())
        with sigint_ignored():  # submit spawns the process: it starts with Ctrl-C ignored
            self._pool: ProcessPoolExecutor | None = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_warm
            )
            self._started: Future[int] = self._pool.submit(_ping)
        self._processes = [p for p in multiprocessing.active_children() if p not in before]

    def render(self, name: str, func: str, table: Any, path: Path) -> Future[str] | None:
        """Send figure `name` (one of WORKER_COLUMNS), drawn by `schedsim.outputs.plots.<func>`, with the
        columns it reads; None where the worker is gone."""
        if self._pool is None:
            return None
        try:
            return self._pool.submit(_render, func, table[list(WORKER_COLUMNS[name])], str(path))
        except RuntimeError:  # BrokenProcessPool (a RuntimeError) or a pool already shut down
            return None

    def close(self) -> None:
        """Stop the process (waiting for nothing: any figure still wanted was waited for)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def abandon(self) -> None:
        """Stop the process now, its figures unwanted (Ctrl-C or a failed run: exit at once, not
        after the worker's warm-up or figures)."""
        for process in self._processes:
            process.terminate()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> PlotWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cores() -> int:
    """Cores this process may run on (the affinity mask where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def start_plot_worker(plots: bool) -> PlotWorker | None:
    """A worker where it pays: plots wanted and a second core to run it on
    (SCHEDSIM_PLOT_WORKER=0 turns it off)."""
    if not plots or os.environ.get("SCHEDSIM_PLOT_WORKER", "1") == "0":
        return None
    if _cores() < 2:
        return None
    try:
        return PlotWorker()
    except OSError:  # no processes to be had: the parent renders everything
        return None
