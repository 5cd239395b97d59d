"""Schema dtypes, defaults and the invariants every Workload satisfies, whoever produced it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import TraceError
from .schema import ATTR_PREFIX_BLOCK_SIZE, ATTR_SOURCE, OPTIONAL_COLUMNS, REQUIRED_COLUMNS

_ID_DTYPE = "string[pyarrow]"


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    """Cast present columns to schema dtypes (ids as compact Arrow strings); order columns."""
    out = df.copy(deep=False)
    for name, dtype in REQUIRED_COLUMNS.items():
        if name in out.columns:
            out[name] = out[name].astype(_ID_DTYPE if dtype == "string" else dtype)
    for name, (dtype, _default) in OPTIONAL_COLUMNS.items():
        if name in out.columns and dtype != "object":
            out[name] = out[name].astype(_ID_DTYPE if dtype == "string" else dtype)
    order = [c for c in [*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS] if c in out.columns]
    out = out[order + [c for c in out.columns if c not in order]]
    out.attrs = dict(df.attrs)
    return out


def with_defaults(df: pd.DataFrame) -> pd.DataFrame:
    """Every optional column present, absent ones filled with the value absence means."""
    out = df.copy(deep=False)
    n = len(out)
    for name, (dtype, default) in OPTIONAL_COLUMNS.items():
        if name not in out.columns:
            if dtype == "object":
                out[name] = pd.Series([default] * n, dtype=object, index=out.index)
            else:
                out[name] = pd.Series([default] * n, index=out.index).astype(
                    _ID_DTYPE if dtype == "string" else dtype
                )
    out.attrs = dict(df.attrs)
    return normalize(out)


def _fail(df: pd.DataFrame, mask: np.ndarray, field: str, what: str) -> None:
    """Raise naming the first offending row (its position and request id)."""
    idx = np.flatnonzero(mask)
    if idx.size:
        i = int(idx[0])
        rid = df["request_id"].iloc[i] if "request_id" in df.columns else "?"
        raise TraceError(
            f"row {i} (request {rid}): {what} ({idx.size} row(s) affected)",
            str(df.attrs.get(ATTR_SOURCE, "<workload>")),
            None,
            field,
        )


def validate_workload(df: pd.DataFrame) -> pd.DataFrame:
    """Check the schema invariants; returns the normalized frame so callers can chain it."""
    src = str(df.attrs.get(ATTR_SOURCE, "<workload>"))
    for name in REQUIRED_COLUMNS:
        if name not in df.columns:
            raise TraceError("missing required column", src, None, name)
    unknown = [c for c in df.columns if c not in REQUIRED_COLUMNS and c not in OPTIONAL_COLUMNS]
    if unknown:
        raise TraceError(f"unknown column(s) {unknown}", src, None, unknown[0])
    t = pd.to_numeric(df["arrival_time"], errors="coerce").to_numpy(dtype=float)
    _fail(df, ~np.isfinite(t), "arrival_time", "not a finite number")
    _fail(df, t < 0, "arrival_time", "negative arrival time")
    _fail(df, np.diff(t, prepend=t[:1]) < 0, "arrival_time", "arrival times decrease")
    for name in ("prompt_tokens", "output_tokens"):
        v = pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float)
        _fail(df, ~(v >= 1) | (v != np.floor(v)), name, "token count must be a whole number >= 1")
    ids = df["request_id"]
    _fail(df, ids.isna().to_numpy(), "request_id", "missing request id")
    _fail(df, ids.duplicated().to_numpy(), "request_id", "duplicate request id")
    if "max_tokens" in df.columns:
        m = pd.to_numeric(df["max_tokens"], errors="coerce").to_numpy(dtype=float)
        _fail(df, m < 1, "max_tokens", "max_tokens must be >= 1")
    if "prompt_block_hashes" in df.columns:
        _check_hashes(df, src)
    return normalize(df)


def _check_hashes(df: pd.DataFrame, src: str) -> None:
    """Hashes need a block size, and at most ceil(prompt / block size) entries per request."""
    hashes = df["prompt_block_hashes"]
    present = hashes.notna().to_numpy()
    if not present.any():
        return
    size = df.attrs.get(ATTR_PREFIX_BLOCK_SIZE)
    if not isinstance(size, int | np.integer) or size < 1:
        raise TraceError(
            f"prompt_block_hashes given but attrs[{ATTR_PREFIX_BLOCK_SIZE!r}] is {size!r}",
            src,
            None,
            "prompt_block_hashes",
        )
    n = np.fromiter((len(h) if h is not None else 0 for h in hashes), np.int64, len(df))
    cap = -(-df["prompt_tokens"].to_numpy(dtype=np.int64) // int(size))
    _fail(df, n > cap, "prompt_block_hashes", f"more hashes than ceil(prompt_tokens / {size})")
