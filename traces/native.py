"""The native Workload files (CSV, JSONL, Parquet) that `schedsim trace convert` writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import TraceError
from .schema import ATTR_PREFIX_BLOCK_SIZE, ATTR_SOURCE
from .validate import normalize, validate_workload

NATIVE_SUFFIXES = (".csv", ".jsonl", ".parquet")


def _hash_column(df: pd.DataFrame) -> str:
    """The block size travels in the column name, so plain CSV/JSONL stay self-describing."""
    size = df.attrs.get(ATTR_PREFIX_BLOCK_SIZE)
    return f"prompt_block_hashes@{size}" if size else "prompt_block_hashes"


def write_workload(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a validated Workload; the format follows the suffix (.csv, .jsonl, .parquet)."""
    path = Path(path)
    df = validate_workload(df)
    if path.suffix not in NATIVE_SUFFIXES:
        raise TraceError(
            f"unknown output format {path.suffix!r}; use one of {NATIVE_SUFFIXES}", str(path), None, None
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        out = df.copy()
        if "prompt_block_hashes" in out.columns:
            out["prompt_block_hashes"] = [None if h is None else list(h) for h in out["prompt_block_hashes"]]
        out.attrs = {k: v for k, v in df.attrs.items() if _jsonable(v)}
        out.to_parquet(path, index=False)
        return path
    out = df.rename(columns={"prompt_block_hashes": _hash_column(df)})
    if path.suffix == ".csv":
        if "prompt_block_hashes" in df.columns:
            out[_hash_column(df)] = [
                " ".join(map(str, h)) if h is not None else "" for h in df["prompt_block_hashes"]
            ]
        out.to_csv(path, index=False, float_format="%.9f")
    else:
        with open(path, "w", encoding="utf-8") as fh:
            for rec in out.to_dict(orient="records"):
                fh.write(json.dumps({k: _plain(v) for k, v in rec.items()}) + "\n")
    return path


def _plain(v: object) -> object:
    """JSON-ready scalars: NA becomes null, tuples become lists, numpy scalars become Python."""
    if isinstance(v, tuple):
        return list(v)
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    return v.item() if isinstance(v, np.generic) else v


def _jsonable(v: object) -> bool:
    """Parquet stores attrs as JSON; drop whatever would not survive."""
    try:
        json.dumps(v)
    except TypeError:
        return False
    return True


def read_parquet_workload(path: str | Path) -> pd.DataFrame:
    """Parquet written by write_workload (attrs included); validated like every other input."""
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises many types for corrupt files
        raise TraceError(f"unreadable Parquet file: {exc}", str(path)) from None
    if "prompt_block_hashes" in df.columns:
        df["prompt_block_hashes"] = [
            None if h is None else tuple(int(x) for x in h) for h in df["prompt_block_hashes"]
        ]
    df.attrs[ATTR_SOURCE] = str(path)
    return validate_workload(normalize(df))
