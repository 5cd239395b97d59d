"""Compare several policies or configs on one workload and seed: one tidy table, side by side."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from schedsim.outputs.files import write_run
from schedsim.outputs.folder import OutputFolder, slug
from schedsim.outputs.numbers import format_value
from schedsim.policies import EngineFailure
from schedsim.run.result import LATENCY_KEYS
from schedsim.run.simulate import simulate
from schedsim.run.toml_config import ConfigError, coerce, load_toml, merge, to_jsonable
from schedsim.run.workload import load_trace, trace_options
from tqdm import tqdm

# The side-by-side table's rows: vLLM's benchmark names first, then this project's own metrics.
COMPARE_METRICS: tuple[str, ...] = (
    "num_requests",
    "num_finished",
    "duration_s",
    "request_throughput",
    "output_throughput",
    *LATENCY_KEYS,
    "mean_queueing_ms",
    "mean_hol_blocking_ms",
    "p99_hol_blocking_ms",
    "hol_blocked_fraction",
    "num_preemptions",
    "preemption_rate",
    "preemptions_per_1k_steps",
    "num_pauses",
    "pause_rate",
    "pauses_per_1k_steps",
    "recomputed_tokens",
    "recomputed_share",
    "prefix_cache_hit_rate",
    "num_prefix_skips",
    "truncated_tokens",
    "mean_kv_usage",
    "max_kv_usage",
    "gpu_idle_fraction",
    "cpu_hidden_fraction",
    "request_goodput",
    "goodput_fraction",
    "num_steps",
    "sim_wall_s",
)


def _quantile_ms(values: pd.Series, q: float) -> float:
    """A quantile of a seconds column in ms (NaN when empty)."""
    values = values.dropna()
    return float(values.quantile(q) * 1e3) if len(values) else math.nan


def derived_metrics(summary: dict[str, Any], requests: pd.DataFrame) -> dict[str, Any]:
    """Summary scalars plus the per-request figures the compare table adds (HOL tail and share,
    goodput share)."""
    out: dict[str, Any] = {k: v for k, v in summary.items() if isinstance(v, (int, float, bool)) or v is None}
    n = max(int(summary.get("num_requests", len(requests)) or 0), 1)
    if "hol_blocking_time" in requests:
        hol = requests["hol_blocking_time"]
        out["p99_hol_blocking_ms"] = _quantile_ms(hol, 0.99)
        out["hol_blocked_fraction"] = float((hol.fillna(0) > 0).mean()) if len(hol) else math.nan
    if out.get("request_goodput") is not None and summary.get("duration_s"):
        out["goodput_fraction"] = out["request_goodput"] * summary["duration_s"] / n
    return out


def make_variants(base: Any, policies: Sequence[str], files: Sequence[Path]) -> list[tuple[str, Any]]:
    """(label, RunConfig) for each policy and each variant file, in the order given.

    A variant file overlays its keys on the base run and inherits every other setting: with one
    policy named, that policy; with several, the variant runs on each (`<policy>+<stem>`) unless
    it names its own. With no policy named, the base run itself is the first row."""
    names = [n for item in policies for n in item.split(",") if n]
    if len(names) == 1:
        base = dataclasses.replace(base, policy=names[0])
    variants = [(name, dataclasses.replace(base, policy=name)) for name in names]
    if files and not names:
        variants.append((base.policy, base))
    for path in files:
        data = load_toml(path)
        on = [base.policy] if len(names) <= 1 or "policy" in data else names
        for policy in on:
            label = path.stem if len(on) == 1 else f"{policy}+{path.stem}"
            variants.append((label, overlay(dataclasses.replace(base, policy=policy), data, path)))
    if not variants:
        variants = [(getattr(base, "policy", "base"), base)]
    labels = [label for label, _ in variants]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ConfigError(f"compare: duplicate variant label(s) {dupes}")
    folders = [slug(label) for label in labels]
    clash = sorted({x for x in folders if folders.count(x) > 1})
    if clash:
        raise ConfigError(f"compare: variant labels {labels} share the folder name(s) {clash}")
    return variants


def overlay(base: Any, data: Mapping[str, Any], path: Path) -> Any:
    """The base config with a variant file's keys on top (nested tables merge key by key)."""
    merged = coerce(type(base), merge(to_jsonable(base), data), str(path))
    try:
        return type(base)(**merged)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


def run_variants(
    variants: Sequence[tuple[str, Any]], progress: bool = True, workload: pd.DataFrame | None = None
) -> dict[str, Any]:
    """Simulate each (label, RunConfig) on one loaded copy of its trace (or on `workload` for all)."""
    traces: dict[str, pd.DataFrame] = {}
    results = {}
    for label, config in tqdm(variants, desc="compare", disable=not progress, unit="run"):
        key = f"{config.trace} {trace_options(config)}"
        if workload is None and key not in traces:  # simulate() applies max_requests, rate
            traces[key] = load_trace(config)
        shared = workload if workload is not None else traces[key]
        try:
            results[label] = simulate(config, workload=shared, progress=False)
        except EngineFailure as exc:
            exc.add_note(f"variant {label!r}")  # which run the engine's failure stopped
            raise
    return results


def compare_table(results: Mapping[str, Any]) -> pd.DataFrame:
    """One tidy row per variant: label, resolved policy, every setting where the rows differ
    (`config.<key>`, as text) and every metric of the side-by-side table."""
    differ = config_differences({label: r.config for label, r in results.items()})
    return pd.DataFrame(
        [
            {
                "label": label,
                "policy": r.config.get("policy"),
                **{f"config.{key}": values[i] for key, values in differ.items()},
                **derived_metrics(r.summary, r.requests),
            }
            for i, (label, r) in enumerate(results.items())
        ]
    )


_ABSENT = object()  # a setting one row's policy does not have


def _settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run's settings, flat: its RunConfig keys and its policy's whole config (defaults filled)."""
    out = {k: v for k, v in config.items() if not isinstance(v, dict)}
    out.update(config.get("policy_options") or {})
    out.update(config.get("policy_config") or {})
    out.pop("policy", None)
    return out


def _text(value: Any) -> str:
    """A setting as a TOML user writes it (true, none, 512); '-' where the policy has no such key."""
    if value is _ABSENT:
        return "-"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def config_differences(configs: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Every setting whose value is not the same in all rows: key -> one value per row, as text."""
    flat = [_settings(c) for c in configs.values()]
    keys = dict.fromkeys(k for row in flat for k in row)
    out = {}
    for key in keys:
        values = [_text(row.get(key, _ABSENT)) for row in flat]
        if len(set(values)) > 1:
            out[key] = values
    return out


def compare_configs(
    variants: Sequence[tuple[str, Any]], out: Path | None = None, progress: bool = True, plots: bool = True
) -> pd.DataFrame:
    """Simulate each variant; with `out`, write them as one complete output folder (see write_compare)."""
    if out is None:
        return compare_table(run_variants(variants, progress))
    with OutputFolder(out) as tmp:  # the lock and the write probe, before simulating
        results = run_variants(variants, progress)
        table = compare_table(results)
        write_compare(results, table, tmp, plots)
    return table


def write_compare(results: Mapping[str, Any], table: pd.DataFrame, out: Path, plots: bool = True) -> None:
    """Per-variant tables, compare.parquet and the overlaid plots, into a folder the caller holds."""
    from schedsim.outputs.compare_plots import plot_compare  # matplotlib, only when plotting

    for label, result in results.items():
        write_run(result, out / slug(label), plots=False)
    table.to_parquet(out / "compare.parquet", index=False)
    if plots:
        plot_compare(results, out)


def side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """Metrics as rows, variants as columns: the table people read; the resolved policy and the
    settings that differ come first, so a difference in the numbers has its cause beside it."""
    settings = ["policy", *[c for c in table.columns if c.startswith("config.")]]
    metrics = [m for m in COMPARE_METRICS if m in table.columns]
    return table.set_index("label")[settings + metrics].T


def format_side_by_side(table: pd.DataFrame) -> str:
    """The side-by-side table as text with sensible precision."""
    return side_by_side(table).map(format_value).to_string()
