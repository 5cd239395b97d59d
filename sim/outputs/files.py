"""The output directory of one run: parquet tables, summary.json, config.json and the PNG plots."""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
from schedsim.outputs.figures import RUN_PLOTS, WORKER_COLUMNS
from schedsim.outputs.numbers import format_value

# Files every `schedsim run` output directory holds (plots only without --no-plots).
TABLE_FILES = ("requests.parquet", "steps.parquet", "timeline.parquet")
JSON_FILES = ("summary.json", "config.json")


def _json_default(obj: Any) -> Any:
    """numpy scalars and other stragglers as plain JSON values."""
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def _clean(value: Any) -> Any:
    """NaN/inf become null: summary.json stays strict JSON that every reader accepts."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(path: Path, data: Any) -> None:
    """Strict, indented JSON."""
    path.write_text(json.dumps(_clean(data), indent=2, default=_json_default, allow_nan=False) + "\n")


def write_run(result: Any, out: Path, plots: bool = True, worker: Any = None) -> list[Path]:
    """Write every table as parquet (with its dtypes), the JSONs and the plots; returns the paths.

    The parquet writer runs in a thread while the plots render: arrow encodes without the GIL,
    so the two overlap (the whole-trace run writes millions of rows, ~1 s of each). A
    `plot_worker.PlotWorker` renders two of the figures in its own process meanwhile.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    remote = _send_plots(worker, result, out) if plots and worker is not None else {}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="schedsim-parquet") as pool:
        tables = pool.submit(write_tables, result.tables(), out)
        written = []
        for name, data in (("summary.json", result.summary), ("config.json", result.config)):
            write_json(out / name, data)
            written.append(out / name)
        if plots:
            from schedsim.outputs.cluster_plots import write_cluster_plots  # matplotlib, only when plotting
            from schedsim.outputs.plots import write_run_plots

            written += write_run_plots(result, out, remote)
            written += write_cluster_plots(result, out)
        return tables.result() + written


def _send_plots(worker: Any, result: Any, out: Path) -> dict[str, Any]:
    """The worker's figures, submitted: name -> future (a name it could not take is left out)."""
    sent = {}
    for name, func, table in RUN_PLOTS:
        if name in WORKER_COLUMNS:
            future = worker.render(name, func, getattr(result, table), out / name)
            if future is not None:
                sent[name] = future
    return sent


def write_tables(tables: dict[str, Any], out: Path) -> list[Path]:
    """Each table as `<name>.parquet`; dictionary encoding only for its categorical and string
    columns (on numeric columns it is a search that never pays: half the writing time)."""
    paths = []
    for name, table in tables.items():
        path = out / f"{name}.parquet"
        coded = [c for c, dt in table.dtypes.items() if not _is_numeric(dt)]
        table.to_parquet(path, index=False, use_dictionary=coded or False)
        paths.append(path)
    return paths


def _is_numeric(dtype: Any) -> bool:
    """Numbers and booleans (plain or nullable), where dictionary encoding is not worth trying."""
    return bool(pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype))


def format_summary_value(value: Any) -> str:
    """A summary value for the terminal (None stays 'None': the summary's own word for unset)."""
    return "None" if value is None else format_value(value)


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as a two-column table, in the summary's own key order."""
    rows = [(k, format_summary_value(v)) for k, v in summary.items() if not isinstance(v, (dict, list))]
    width = max((len(k) for k, _ in rows), default=0)
    rule = "-" * (width + 16)
    return "\n".join([rule, *(f"{k:<{width}}  {v:>14}" for k, v in rows), rule])
