"""Public CSV trace formats: Azure LLM inference (2023/2024), BurstGPT, and mapped generic CSV."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .collect import LoadOptions
from .csvload import HASHES_COLUMN, ColumnMap, load_csv_table
from .reading import read_csv_header
from .schema import OPTIONAL_COLUMNS
from .validate import normalize

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = (
    "Timestamp",
    "Session ID",
    "Elapsed time",
    "Model",
    "Request tokens",
    "Response tokens",
    "Total tokens",
    "Log Type",
)
BURSTGPT_V2_ONLY = ("Session ID", "Elapsed time")


def load_azure(
    path: str | Path,
    *,
    skip_bad: bool = False,
    sort: bool = False,
    head: int | None = None,
    window: tuple[float, float] | None = None,
) -> pd.DataFrame:
    """Azure LLM inference trace (2023 code/conv, 2024 week-long): streamed in chunks."""
    cmap = ColumnMap(*AZURE_COLUMNS, time_unit="datetime", exact=True)
    df = load_csv_table(path, cmap, LoadOptions(skip_bad, sort, head, window))
    df.attrs["format"] = "azure"
    return normalize(df)


def load_burstgpt(
    path: str | Path,
    *,
    model: str | list[str] | None = None,
    log_type: str | list[str] | None = None,
    skip_bad: bool = False,
    sort: bool = False,
    head: int | None = None,
    window: tuple[float, float] | None = None,
) -> pd.DataFrame:
    """BurstGPT: seconds timestamps; keep only the given models / log types (counted as filtered).

    Reads the current layout (with Session ID and Elapsed time) and the first release's layout
    (without both); any other difference is a header error.
    """
    filters: dict[str, set[str]] = {}
    if model is not None:
        filters["Model"] = {model} if isinstance(model, str) else set(model)
    if log_type is not None:
        filters["Log Type"] = {log_type} if isinstance(log_type, str) else set(log_type)
    header, _ = read_csv_header(Path(path))
    v1 = "Session ID" not in header and "Elapsed time" not in header  # first release's layout
    columns = tuple(c for c in BURSTGPT_COLUMNS if not v1 or c not in BURSTGPT_V2_ONLY)
    optional = {"request_class": "Model"} if v1 else {"session_id": "Session ID", "request_class": "Model"}
    cmap = ColumnMap(
        "Timestamp",
        "Request tokens",
        "Response tokens",
        time_unit="s",
        optional=optional,
        filters=filters,
        exact=True,
        also_required=columns,
        total_tokens="Total tokens",
    )
    df = load_csv_table(path, cmap, LoadOptions(skip_bad, sort, head, window))
    if not v1:  # turns count within the loaded rows of each session
        df["turn"] = df.groupby("session_id", sort=False).cumcount() if len(df) else []
    df.attrs["format"] = "burstgpt"
    return normalize(df)


def load_csv(
    path: str | Path,
    mapping: dict[str, str] | None = None,
    *,
    time_unit: str = "s",
    block_size: int | None = None,
    skip_bad: bool = False,
    sort: bool = False,
    head: int | None = None,
    window: tuple[float, float] | None = None,
) -> pd.DataFrame:
    """Any CSV, given `mapping` {workload column: file column}; identity for the native format."""
    header, _ = read_csv_header(Path(path))
    cmap, size = _column_map(header, mapping or {}, time_unit)
    df = load_csv_table(path, cmap, LoadOptions(skip_bad, sort, head, window), block_size=block_size or size)
    df.attrs["format"] = "csv"
    return normalize(df)


def _column_map(header: list[str], mapping: dict[str, str], time_unit: str) -> tuple[ColumnMap, int | None]:
    """Mapped columns win; unmapped Workload columns are picked up by their own names."""
    size = None
    full = dict(mapping)
    for name in header:
        m = HASHES_COLUMN.match(name)
        if m and "prompt_block_hashes" not in full:
            full["prompt_block_hashes"] = name
            size = int(m.group(1)) if m.group(1) else None
        elif name in OPTIONAL_COLUMNS or name == "request_id":
            full.setdefault(name, name)
    arrival, prompt, output = (full.get(k, k) for k in ("arrival_time", "prompt_tokens", "output_tokens"))
    optional = {k: v for k, v in full.items() if k in OPTIONAL_COLUMNS}
    return ColumnMap(
        arrival, prompt, output, time_unit=time_unit, request_id=full.get("request_id"), optional=optional
    ), size
