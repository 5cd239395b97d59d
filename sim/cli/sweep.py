"""`schedsim sweep`: a grid of runs on a process pool or Ray, resumable, with plots per knob."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from schedsim.cli.args import add_run_arguments, parse_scalar, resolve_run_config
from schedsim.cli.rejections import add_strict_argument, report_rejections, warn
from schedsim.outputs.folder import WorkingFolder, chosen_out
from schedsim.run.rejections import max_model_len_of, rejections, unfinished
from schedsim.run.resolve import check_config
from schedsim.run.toml_config import ConfigError, load_toml

DEFAULT_METRICS = (
    "p99_ttft_ms",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "output_throughput",
    "gpu_idle_fraction",
    "num_preemptions",
    "recomputed_tokens",
)
SWEEP_TABLES = ("grid", "runs", "sweep")  # tables of a sweep TOML that are not RunConfig keys
SWEEP_ENGINES = ("process", "ray")


def add_parser(sub: Any) -> None:
    """Register `sweep` (`--engine` picks the sweep's executor; the loop mode is --loop-engine)."""
    p = sub.add_parser("sweep", help="a grid of runs on a process pool or Ray, resumable")
    add_run_arguments(p, "runs/sweep-<YYYYmmdd-HHMMSS>", {"engine": "--loop-engine"})
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a swept RunConfig key and its values (repeatable; the grid is their product). "
        "A TOML --config may instead hold [grid] and [[runs]] tables",
    )
    p.add_argument(
        "--engine",
        dest="sweep_engine",
        choices=SWEEP_ENGINES,
        default=None,
        help="local process pool (default) or Ray (needs the `ray` extra)",
    )
    p.add_argument("--workers", type=int, default=None, help="parallel runs (default: min(2, CPUs))")
    p.add_argument(
        "--x",
        default=None,
        metavar="KEY",
        help="the knob on the x axis of the plots (default: the first swept key except policy)",
    )
    p.add_argument(
        "--metrics",
        default=",".join(DEFAULT_METRICS),
        help="comma-separated metrics to plot against the knob",
    )
    add_strict_argument(p)
    p.set_defaults(func=cmd_sweep)


def present(row: Mapping[str, Any]) -> dict[str, Any]:
    """A results row without the cells its run lacks (NaN in the table: a stopped point's metrics)."""
    return {k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}


def report_engine_failures(rows: Sequence[tuple[Any, Mapping[str, Any]]]) -> None:
    """One warning line per point (run, its results row) whose policy stopped where its engine
    itself fails."""
    for run, row in rows:
        message = row.get("engine_failure_message")
        if isinstance(message, str):
            warn(f"run {run.params}: {message}; its row has no metrics")


def parse_grid_flags(items: Sequence[str]) -> dict[str, list[Any]]:
    """`--grid rate=1,2,4` → {'rate': [1, 2, 4]}."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise ConfigError(f"command line: --grid expects KEY=V1,V2,..., got {item!r}")
        grid[key.strip().replace("-", "_")] = [parse_scalar(v.strip()) for v in values.split(",")]
    return grid


def sweep_tables(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """The [grid], [[runs]] and [sweep] tables of the --config file (all optional)."""
    if args.config is None:
        return {}, [], {}
    data = load_toml(args.config)
    grid, runs, opts = data.get("grid", {}), data.get("runs", []), data.get("sweep", {})
    if not isinstance(grid, Mapping) or not isinstance(runs, list) or not isinstance(opts, Mapping):
        raise ConfigError(f"{args.config}: [grid] and [sweep] must be tables, [[runs]] an array of tables")
    unknown = sorted(set(opts) - {"x", "metrics", "engine", "workers"})
    if unknown:
        raise ConfigError(
            f"{args.config} [sweep]: unknown key {unknown[0]!r}; known: engine, metrics, workers, x"
        )
    return dict(grid), runs, dict(opts)


def cmd_sweep(args: argparse.Namespace) -> int:
    """Expand the grid, run what is not recorded yet, plot each metric against the knob."""
    file_grid, file_runs, opts = sweep_tables(args)
    base = resolve_run_config(args, ignore=SWEEP_TABLES)
    from schedsim.experiments.sweep import (  # lazy subcommand
        SweepInterrupted,
        execute_sweep,
        expand_grid,
        record_ids,
    )
    from schedsim.experiments.sweep_ray import require_ray
    from schedsim.outputs.compare_plots import plot_sweep

    grid = {**file_grid, **parse_grid_flags(args.grid)}
    runs = expand_grid(base, grid, file_runs, source=str(args.config or "command line"))
    for run in runs:  # fail on a bad name here, not in a worker halfway through the sweep
        check_config(run.config, f"run {run.params}")
    engine = args.sweep_engine or opts.get("engine", "process")  # flags beat the file
    if engine not in SWEEP_ENGINES:
        raise ConfigError(f"{args.config} [sweep]: engine must be one of {SWEEP_ENGINES}, got {engine!r}")
    if engine == "ray":
        require_ray()  # before any point runs
    workers = args.workers or int(opts.get("workers", min(2, os.cpu_count() or 1)))
    x = args.x or opts.get("x") or next((k for k in grid if k != "policy"), None)
    swept = list(dict.fromkeys(k for run in runs for k in run.params))
    if x is not None and x not in swept:
        where = "--x" if args.x else f"{args.config} [sweep] x"
        raise ConfigError(f"{where}: {x!r} is not a swept key (swept: {', '.join(swept) or 'none'})")
    metrics = opts.get("metrics", args.metrics)
    metrics = [m for m in (metrics.split(",") if isinstance(metrics, str) else metrics) if m]
    folder = WorkingFolder(*chosen_out(args.out, "sweep"), keep=("runs",))
    with folder as out:  # the lock and the write probe; earlier records stay for the resume
        saved = 0
        try:
            table = execute_sweep(runs, out, engine=engine, workers=workers, progress=not args.no_progress)
            saved = len(runs)
            if x is not None:
                plot_sweep(table, x, metrics, out, group_by=["policy", *grid])
        except KeyboardInterrupt as exc:
            saved = exc.saved if isinstance(exc, SweepInterrupted) else saved
            hint = "rerun to resume" if args.out is not None else f"rerun with --out {out} to resume"
            raise KeyboardInterrupt(
                f"partial sweep: {saved}/{len(runs)} points saved in {out}/, {hint}"
            ) from None
        folder.complete()
    print(
        table[
            [c for c in dict.fromkeys(["policy", *swept, *metrics, "engine_failure"]) if c in table]
        ].to_string(index=False)
    )
    print(f"\nwrote {out}/results.parquet ({len(table)} runs)")
    by_id = table.set_index("run_id").to_dict("index") if "run_id" in table else {}
    rows = [(run, present(by_id.get(rid, {}))) for run, rid in zip(runs, record_ids(runs), strict=True)]
    return report_sweep(table, rows, [m for m in metrics if m not in table], swept, args.strict)


def report_sweep(
    table: Any,
    rows: Sequence[tuple[Any, Mapping[str, Any]]],
    absent: list[str],
    swept: list[str],
    strict: bool,
) -> int:
    """The warnings after a sweep's table (metrics asked for that no row has, points stopped by their
    engine, rejected or unfinished requests) and the exit status."""
    if absent:
        known = ", ".join(c for c in table.columns if c not in ("run_id", "policy", *swept))
        warn(f"--metrics: no column {', '.join(absent)} in the results (columns: {known})")
    report_engine_failures(rows)
    found = [(f"run {run.params}", rejections(row, max_model_len_of(run.config))) for run, row in rows]
    cut = [(f"run {run.params}", unfinished(row)) for run, row in rows]
    return report_rejections(found, strict, cut)
