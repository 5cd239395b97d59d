"""Sweeps: a grid of runs on a process pool or Ray; resumable, one tidy parquet table."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import pandas as pd
from schedsim.experiments.compare import derived_metrics
from schedsim.experiments.sweep_ray import execute_ray
from schedsim.run.simulate import simulate
from schedsim.run.toml_config import ConfigError, coerce, merge, to_jsonable
from schedsim.run.workload import trace_options
from schedsim.traces import load_workload
from tqdm import tqdm


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


def expand_grid(
    base: Any,
    grid: Mapping[str, Sequence[Any]],
    runs: Sequence[Mapping[str, Any]] = (),
    source: str = "sweep",
) -> list[SweepRun]:
    """Every explicit run (or just the base) times the Cartesian product of the grid, de-duplicated."""
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ConfigError(f"{source}: grid key {key!r} needs a non-empty list of values")
    keys = list(grid)
    out: dict[str, SweepRun] = {}
    base_data = to_jsonable(base)
    for extra in runs or [{}]:
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
def _trace(name: str, options: tuple[tuple[str, Any], ...]) -> pd.DataFrame:
    """A worker loads each trace once, however many grid points replay it."""
    return load_workload(name, **dict(options))


def simulate_one(config: Any) -> dict[str, Any]:
    """Worker body (module level so process pools and Ray can pickle it): one run's metrics."""
    trace = _trace(config.trace, tuple(sorted(trace_options(config).items())))
    result = simulate(config, workload=trace, progress=False)
    return derived_metrics(result.summary, result.requests)


def _record(out: Path, run: SweepRun, metrics: Mapping[str, Any]) -> None:
    """Persist one finished run atomically; its presence is what makes the sweep resumable."""
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    tmp = runs_dir / f".{run.run_id}.tmp"
    tmp.write_text(
        json.dumps(
            {
                "run_id": run.run_id,
                "params": to_jsonable(run.params),
                "config": to_jsonable(run.config),
                "metrics": metrics,
            },
            sort_keys=True,
            default=str,
        )
    )
    tmp.replace(runs_dir / f"{run.run_id}.json")


def _execute(
    pending: Sequence[SweepRun], engine: str, workers: int
) -> Iterator[tuple[SweepRun, dict[str, Any]]]:
    """Yield (run, metrics) as runs finish, on the chosen engine."""
    if engine == "ray":
        yield from execute_ray(simulate_one, pending, workers)
    elif workers <= 1 or len(pending) <= 1:
        for run in pending:
            yield run, simulate_one(run.config)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(simulate_one, r.config): r for r in pending}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()


def run_sweep(
    runs: Sequence[SweepRun], out: Path, engine: str = "process", workers: int = 2, progress: bool = True
) -> pd.DataFrame:
    """Run what is not already recorded under `out/runs/`, then assemble out/results.parquet."""
    done = {p.stem for p in (out / "runs").glob("*.json")}
    pending = [r for r in runs if r.run_id not in done]
    bar = tqdm(
        total=len(runs), initial=len(runs) - len(pending), desc="sweep", unit="run", disable=not progress
    )
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
        params = {k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in rec["params"].items()}
        rows.append(
            {"run_id": rec["run_id"], "policy": rec["config"].get("policy"), **params, **rec["metrics"]}
        )
    return pd.DataFrame(rows)
