"""`schedsim sweep`: a grid of runs on a process pool or Ray; resumable, one tidy parquet table."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from schedsim.cli.args import parse_scalar
from schedsim.experiments.compare import derived_metrics
from schedsim.run.toml_config import ConfigError, coerce, load_toml, merge, to_jsonable

DEFAULT_METRICS = ("p99_ttft_ms", "mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "output_throughput",
                   "gpu_idle_fraction", "num_preemptions", "recomputed_tokens")
SWEEP_TABLES = ("grid", "runs", "sweep")  # tables of a sweep TOML that are not RunConfig keys
SWEEP_ENGINES = ("process", "ray")


@dataclasses.dataclass(frozen=True)
class SweepRun:
    """One point of the grid: the knobs that vary, the resolved config and its stable id."""

    params: dict[str, Any]
    config: Any
    run_id: str


def run_id(config: Any) -> str:
    """Hash of the resolved config, so a finished run is recognised whatever order the grid takes."""
    blob = json.dumps(to_jsonable(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{'policy_options.x': 1} → {'policy_options': {'x': 1}} so dotted grid keys reach nested fields."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def expand_grid(base: Any, grid: Mapping[str, Sequence[Any]], runs: Sequence[Mapping[str, Any]] = (),
                source: str = "sweep") -> list[SweepRun]:
    """Every explicit run (or just the base) times the Cartesian product of the grid, de-duplicated."""
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ConfigError(f"{source}: grid key {key!r} needs a non-empty list of values")
    keys = list(grid)
    out: dict[str, SweepRun] = {}
    base_data = to_jsonable(base)
    for extra in (runs or [{}]):
        for combo in itertools.product(*(grid[k] for k in keys)):
            params = {**dict(extra), **dict(zip(keys, combo, strict=True))}
            data = coerce(type(base), merge(base_data, _nest(params)), source)
            try:
                config = type(base)(**data)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{source}: run {params}: {exc}") from None
            rid = run_id(config)
            out.setdefault(rid, SweepRun(params, config, rid))
    return list(out.values())


@functools.lru_cache(maxsize=4)
def _trace(name: str) -> pd.DataFrame:
    """A worker loads each trace once, however many grid points replay it."""
    from schedsim.traces import load_workload

    return load_workload(name)


def simulate_one(config: Any) -> dict[str, Any]:
    """Worker body (module level so process pools and Ray can pickle it): one run's metrics."""
    from schedsim.run.simulate import simulate

    result = simulate(config, workload=_trace(config.trace), progress=False)
    return derived_metrics(result.summary, result.requests)


def _record(out: Path, run: SweepRun, metrics: Mapping[str, Any]) -> None:
    """Persist one finished run atomically; its presence is what makes the sweep resumable."""
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    tmp = runs_dir / f".{run.run_id}.tmp"
    tmp.write_text(json.dumps({"run_id": run.run_id, "params": to_jsonable(run.params),
                               "config": to_jsonable(run.config), "metrics": metrics},
                              sort_keys=True, default=str))
    tmp.replace(runs_dir / f"{run.run_id}.json")


def _execute(pending: Sequence[SweepRun], engine: str, workers: int
             ) -> Iterator[tuple[SweepRun, dict[str, Any]]]:
    """Yield (run, metrics) as runs finish, on the chosen engine."""
    if engine == "ray":
        from schedsim.experiments.sweep_ray import execute_ray

        yield from execute_ray(pending, workers)
    elif workers <= 1 or len(pending) <= 1:
        for run in pending:
            yield run, simulate_one(run.config)
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(simulate_one, r.config): r for r in pending}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()


def run_sweep(runs: Sequence[SweepRun], out: Path, engine: str = "process",
              workers: int = 2, progress: bool = True) -> pd.DataFrame:
    """Run what is not already recorded under `out/runs/`, then assemble out/results.parquet."""
    from tqdm import tqdm

    done = {p.stem for p in (out / "runs").glob("*.json")}
    pending = [r for r in runs if r.run_id not in done]
    bar = tqdm(total=len(runs), initial=len(runs) - len(pending), desc="sweep", unit="run",
               disable=not progress)
    for run, metrics in _execute(pending, engine, workers):
        _record(out, run, metrics)
        bar.update(1)
    bar.close()
    table = collect(out, {r.run_id for r in runs})
    table.to_parquet(out / "results.parquet", index=False)
    return table


def collect(out: Path, ids: set[str] | None = None) -> pd.DataFrame:
    """One tidy row per recorded run: run_id, the swept knobs, then every scalar metric."""
    rows = []
    for path in sorted((out / "runs").glob("*.json")):
        rec = json.loads(path.read_text())
        if ids is not None and rec["run_id"] not in ids:
            continue
        params = {k: (json.dumps(v) if isinstance(v, (list, dict)) else v)
                  for k, v in rec["params"].items()}
        rows.append({"run_id": rec["run_id"], "policy": rec["config"].get("policy"), **params,
                     **rec["metrics"]})
    return pd.DataFrame(rows)


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `schedsim sweep` beyond the shared run flags."""
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a swept RunConfig key and its values (repeatable; the grid is their product). "
                        "A TOML --config may instead hold [grid] and [[runs]] tables")
    p.add_argument("--engine", dest="sweep_engine", choices=SWEEP_ENGINES, default=None,
                   help="local process pool (default) or Ray (needs the `ray` extra)")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel runs (default: min(2, CPUs))")
    p.add_argument("--x", default=None, metavar="KEY",
                   help="the knob on the x axis of the plots (default: the first swept key except policy)")
    p.add_argument("--metrics", default=",".join(DEFAULT_METRICS),
                   help="comma-separated metrics to plot against the knob")


def parse_grid_flags(items: Sequence[str]) -> dict[str, list[Any]]:
    """`--grid rate=1,2,4` → {'rate': [1, 2, 4]}."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise ConfigError(f"command line: --grid expects KEY=V1,V2,..., got {item!r}")
        grid[key.strip().replace("-", "_")] = [parse_scalar(v.strip()) for v in values.split(",")]
    return grid


def _sweep_tables(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """The [grid], [[runs]] and [sweep] tables of the --config file (all optional)."""
    if args.config is None:
        return {}, [], {}
    data = load_toml(args.config)
    grid, runs, opts = data.get("grid", {}), data.get("runs", []), data.get("sweep", {})
    if not isinstance(grid, Mapping) or not isinstance(runs, list) or not isinstance(opts, Mapping):
        raise ConfigError(f"{args.config}: [grid] and [sweep] must be tables, [[runs]] an array of tables")
    unknown = sorted(set(opts) - {"x", "metrics", "engine", "workers"})
    if unknown:
        raise ConfigError(f"{args.config} [sweep]: unknown key {unknown[0]!r}; "
                          "known: engine, metrics, workers, x")
    return dict(grid), runs, dict(opts)


def run_sweep_cli(args: argparse.Namespace, resolve: Callable[..., Any]) -> int:
    """The `schedsim sweep` command."""
    from schedsim.cli.main import check_config
    from schedsim.outputs.compare_plots import plot_sweep

    file_grid, file_runs, opts = _sweep_tables(args)
    base = resolve(args, args._dests, ignore=SWEEP_TABLES)
    grid = {**file_grid, **parse_grid_flags(args.grid)}
    runs = expand_grid(base, grid, file_runs, source=str(args.config or "command line"))
    for run in runs:  # fail on a bad name here, not in a worker halfway through the sweep
        check_config(run.config, f"run {run.params}")
    engine = args.sweep_engine or opts.get("engine", "process")  # flags beat the file
    if engine not in SWEEP_ENGINES:
        raise ConfigError(f"{args.config} [sweep]: engine must be one of {SWEEP_ENGINES}, got {engine!r}")
    workers = args.workers or int(opts.get("workers", min(2, os.cpu_count() or 1)))
    table = run_sweep(runs, args.out, engine=engine, workers=workers, progress=not args.no_progress)
    x = args.x or opts.get("x") or next((k for k in grid if k != "policy"), None)
    metrics = opts.get("metrics", args.metrics)
    metrics = [m for m in (metrics.split(",") if isinstance(metrics, str) else metrics) if m]
    if x is not None:
        plot_sweep(table, x, metrics, args.out, group_by=["policy", *grid])
    shown = ["policy", *[k for k in grid if k != "policy"], *[m for m in metrics if m in table]]
    print(table[[c for c in dict.fromkeys(shown) if c in table]].to_string(index=False))
    print(f"\nwrote {args.out}/results.parquet ({len(table)} runs)")
    return 0
