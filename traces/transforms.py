"""Workload transforms: rate scaling, windows, head/sample, concatenation, filtering."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from .errors import TraceError, TraceWarning
from .schema import ATTR_PREFIX_BLOCK_SIZE, ATTR_SOURCE
from .validate import normalize, validate_workload


def _keep_attrs(out: pd.DataFrame, src: pd.DataFrame, note: str) -> pd.DataFrame:
    """Carry attrs forward and log the transform in 'transforms', so provenance survives."""
    out.attrs = dict(src.attrs)
    out.attrs["transforms"] = [*src.attrs.get("transforms", []), note]
    return out


def mean_rate(workload: pd.DataFrame) -> float:
    """Requests per second over the trace span: (n - 1) gaps in (last - first) seconds."""
    t = workload["arrival_time"].to_numpy()
    if len(t) < 2 or t[-1] <= t[0]:
        raise TraceError(
            "rate needs at least two requests with distinct arrival times",
            str(workload.attrs.get(ATTR_SOURCE)),
            None,
            "arrival_time",
        )
    return (len(t) - 1) / float(t[-1] - t[0])


def time_scale(workload: pd.DataFrame, factor: float) -> pd.DataFrame:
    """Multiply every inter-arrival gap by `factor` (< 1 compresses, > 1 stretches)."""
    if not np.isfinite(factor) or factor <= 0:
        raise TraceError(f"time scale factor must be > 0, got {factor}", field="factor")
    out = workload.copy()
    t0 = out["arrival_time"].iloc[0] if len(out) else 0.0
    out["arrival_time"] = (out["arrival_time"] - t0) * factor
    return _keep_attrs(out, workload, f"time_scale({factor:g})")


def scale_rate(workload: pd.DataFrame, rate: float) -> pd.DataFrame:
    """Compress or stretch time so the mean request rate becomes `rate` req/s; order is kept.

    A workload with fewer than two distinct arrival times has no rate to scale: it is returned
    unchanged (with the no-op noted in attrs['transforms']), and where several requests all arrive
    at one instant a TraceWarning says the rate had no effect.
    """
    if not np.isfinite(rate) or rate <= 0:
        raise TraceError(f"rate must be > 0 req/s, got {rate}", field="rate")
    t = workload["arrival_time"].to_numpy()
    if len(t) < 2 or t[-1] <= t[0]:
        if len(t) >= 2:
            warnings.warn(
                f"rate {rate:g}: all {len(t)} requests arrive at one instant, so there is no span to "
                "rescale: they arrive together as in the trace (spread them with an arrival process, "
                "`schedsim trace generate`)",
                TraceWarning,
                stacklevel=2,
            )
        return _keep_attrs(workload.copy(), workload, f"scale_rate({rate:g}): no-op, no span")
    out = time_scale(workload, mean_rate(workload) / rate)
    out.attrs["transforms"][-1] = f"scale_rate({rate:g})"
    return out


def head(workload: pd.DataFrame, n: int) -> pd.DataFrame:
    """The first `n` requests by arrival (the `--max-requests` cut)."""
    if n < 0:
        raise TraceError(f"head needs n >= 0, got {n}", field="n")
    return _keep_attrs(workload.head(n).reset_index(drop=True), workload, f"head({n})")


def cap_tokens(workload: pd.DataFrame, max_tokens: int) -> pd.DataFrame:
    """Prompt + output cut to `max_tokens` (Vidur's max_tokens): each keeps at least one token and
    the excess comes off both in proportion, rounded up."""
    if max_tokens < 2:
        raise TraceError(f"cap_tokens needs max_tokens >= 2, got {max_tokens}", field="max_tokens")
    out = workload.copy()
    prompt = np.maximum(out["prompt_tokens"].to_numpy(np.int64), 1)
    output = np.maximum(out["output_tokens"].to_numpy(np.int64), 1)
    total = prompt + output
    excess = np.maximum(total - max_tokens, 0)
    out["prompt_tokens"] = prompt - np.ceil(excess * prompt / total).astype(np.int64)
    out["output_tokens"] = output - np.ceil(excess * output / total).astype(np.int64)
    return _keep_attrs(out, workload, f"cap_tokens({max_tokens})")


def window(workload: pd.DataFrame, start: float, end: float, rebase: bool = True) -> pd.DataFrame:
    """Requests arriving in [start, end) seconds; `rebase` moves the window start to time 0."""
    if not (0 <= start < end):
        raise TraceError(f"window needs 0 <= start < end, got [{start}, {end})", field="window")
    t = workload["arrival_time"]
    out = workload[(t >= start) & (t < end)].reset_index(drop=True)
    if rebase:
        out["arrival_time"] = out["arrival_time"] - start
    return _keep_attrs(out, workload, f"window({start:g}, {end:g})")


def sample(
    workload: pd.DataFrame, n: int | None = None, frac: float | None = None, seed: int = 0
) -> pd.DataFrame:
    """A seeded random subset (thinning), kept in arrival order."""
    if n is not None and frac is None:
        if not 0 <= n <= len(workload):
            raise TraceError(f"n must be in [0, {len(workload)}], got {n}", field="n")
        k = n
    elif frac is not None and n is None:
        if not 0 < frac <= 1:
            raise TraceError(f"frac must be in (0, 1], got {frac}", field="frac")
        k = round(frac * len(workload))
    else:
        raise TraceError("sample needs exactly one of n or frac", field="n")
    rows = np.sort(np.random.default_rng(seed).choice(len(workload), size=k, replace=False))
    out = workload.iloc[rows].reset_index(drop=True)
    return _keep_attrs(out, workload, f"sample({k}, seed={seed})")


def filter_rows(workload: pd.DataFrame, query: str) -> pd.DataFrame:
    """Keep rows matching a pandas query, e.g. 'prompt_tokens < 4096'; the drop count is kept."""
    try:
        out = workload.query(query).reset_index(drop=True)
    except Exception as exc:  # pandas raises many kinds for a bad expression
        raise TraceError(f"bad filter expression {query!r}: {exc}", field="query") from None
    out = _keep_attrs(out, workload, f"filter({query!r})")
    out.attrs["filtered_rows"] = int(workload.attrs.get("filtered_rows", 0)) + len(workload) - len(out)
    return out


def concat(workloads: list[pd.DataFrame], mode: str = "sequential", gap: float = 0.0) -> pd.DataFrame:
    """Join workloads: 'sequential' plays them one after another, 'interleave' merges by time.

    Request ids get a 'w<k>:' prefix and prompt block hashes are renumbered per workload, so
    requests from different sources never appear to share ids or prefixes.
    """
    if mode not in ("sequential", "interleave"):
        raise TraceError(f"mode must be 'sequential' or 'interleave', got {mode!r}", field="mode")
    if not workloads:
        raise TraceError("concat needs at least one workload", field="workloads")
    sizes = {w.attrs.get(ATTR_PREFIX_BLOCK_SIZE) for w in workloads if "prompt_block_hashes" in w.columns}
    if len(sizes) > 1:
        raise TraceError(
            f"cannot concatenate hashes of block sizes {sorted(sizes)}", field="prompt_block_hashes"
        )
    parts, offset = [], 0.0
    for k, w in enumerate(workloads):
        part = w.copy()
        part["request_id"] = f"w{k}:" + part["request_id"].astype(str)
        if "prompt_block_hashes" in part.columns:
            part["prompt_block_hashes"] = [
                None if h is None else tuple((k, x) for x in h) for h in part["prompt_block_hashes"]
            ]
        if mode == "sequential":
            part["arrival_time"] = part["arrival_time"] + offset
            offset = float(part["arrival_time"].max()) + gap if len(part) else offset
        parts.append(part)
    out = pd.concat(parts, ignore_index=True)
    if "prompt_block_hashes" in out.columns:
        out["prompt_block_hashes"] = _renumber(out["prompt_block_hashes"].tolist())
    out = out.sort_values("arrival_time", kind="stable").reset_index(drop=True)
    out.attrs = {
        "source": "concat(" + ", ".join(str(w.attrs.get(ATTR_SOURCE)) for w in workloads) + ")",
        "transforms": [f"concat({mode})"],
    }
    if sizes:
        out.attrs[ATTR_PREFIX_BLOCK_SIZE] = sizes.pop()
    return validate_workload(normalize(out))


def _renumber(hashes: list[tuple[tuple[int, int], ...] | float | None]) -> list[tuple[int, ...] | None]:
    """Dense ints for (workload, hash) pairs: stays collision-free across sources."""
    ids: dict[tuple[int, int], int] = {}
    out: list[tuple[int, ...] | None] = []
    for h in hashes:
        if isinstance(h, tuple):
            out.append(tuple(ids.setdefault(x, len(ids)) for x in h))
        else:  # None, or NaN where a workload had no hashes
            out.append(None)
    return out
