"""Accumulate converted chunks into a Workload, checking order and stopping early for head/window."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .errors import TraceError
from .reading import RowPolicy
from .schema import ATTR_FILTERED, ATTR_SKIPPED, ATTR_SOURCE, REQUIRED_COLUMNS


@dataclass
class LoadOptions:
    """What every loader accepts: strictness, ordering, and how much of the file to read."""

    skip_bad: bool = False
    sort: bool = False
    head: int | None = None
    window: tuple[float, float] | None = None  # [start, end) seconds after the first request

    def __post_init__(self) -> None:
        """Reject impossible limits before a large file is opened."""
        if self.head is not None and self.head < 0:
            raise TraceError(f"head must be >= 0, got {self.head}", field="head")
        if self.window is not None and not (0 <= self.window[0] < self.window[1]):
            raise TraceError(f"window must satisfy 0 <= start < end, got {self.window}", field="window")


@dataclass
class Collector:
    """Receives chunks in file order; enforces non-decreasing time unless asked to sort."""

    file: str
    time_field: str
    opts: LoadOptions
    policy: RowPolicy = field(init=False)
    parts: list[dict[str, np.ndarray]] = field(default_factory=list)
    n_rows: int = 0
    n_seen: int = 0
    filtered: int = 0
    _prev: tuple[float, int, object] | None = None  # (time, line, raw) of the last kept row

    def __post_init__(self) -> None:
        """The policy is shared with the readers so structural and value errors land together."""
        self.policy = RowPolicy(self.file, self.opts.skip_bad)

    def chunk_rows(self, default: int) -> int:
        """Read small chunks when only a short head is wanted, so nothing past it is parsed."""
        if self.opts.head is not None and self.opts.window is None and not self.opts.sort:
            return max(1, min(default, self.opts.head))
        if self.opts.window is not None and not self.opts.sort:
            return min(default, 8192)
        return default

    def window_cut(self, t: np.ndarray, bad: np.ndarray) -> int:
        """Rows of this chunk worth validating: those before the first valid time past the window.

        Rows after that point are never examined, so a corrupt tail beyond the window cannot
        fail a windowed read (the reader stops there anyway).
        """
        if self.opts.window is None or self.opts.sort:
            return len(t)
        past = np.flatnonzero(~bad & (t >= self.opts.window[1]))
        return int(past[0]) + 1 if past.size else len(t)

    def add(self, t: np.ndarray, raw_t: np.ndarray, lines: np.ndarray, cols: dict[str, np.ndarray]) -> bool:
        """Take one converted chunk of valid rows; False tells the reader to stop early."""
        index = np.arange(self.n_seen, self.n_seen + len(t))
        self.n_seen += len(t)
        if not self.opts.sort:
            self._check_order(t, raw_t, lines)
        keep = np.ones(len(t), dtype=bool)
        stop = False
        if self.opts.window is not None and not self.opts.sort:
            start, end = self.opts.window
            keep &= (t >= start) & (t < end)
            stop = bool(len(t)) and bool(t[-1] >= end)
        if self.opts.head is not None and not self.opts.sort:
            room = self.opts.head - self.n_rows
            keep &= np.cumsum(keep) <= room
            stop = stop or keep.sum() >= room
        part = {"arrival_time": t[keep], "_index": index[keep], **{k: v[keep] for k, v in cols.items()}}
        if "_request_id" in cols:  # line numbers are only needed to name a duplicate id
            part["_line"] = lines[keep]
        self.parts.append(part)
        self.n_rows += int(keep.sum())
        return not stop

    def _check_order(self, t: np.ndarray, raw_t: np.ndarray, lines: np.ndarray) -> None:
        """Decreasing timestamps are an error naming both lines; --sort is the remedy, not guessing."""
        if len(t) == 0:
            return
        prev = self._prev or (-np.inf, 0, None)  # nothing precedes the first row: it cannot decrease
        prev_t = np.concatenate([[prev[0]], t[:-1]])
        drops = np.flatnonzero(t < prev_t)
        if drops.size:
            i = int(drops[0])
            p_line, p_raw = (lines[i - 1], raw_t[i - 1]) if i else (prev[1], prev[2])
            raise TraceError(
                f"timestamp decreases: {raw_t[i]!r} is earlier than {p_raw!r} on line "
                f"{p_line}; pass sort=True (CLI: --sort) to sort rows by arrival time",
                self.file,
                int(lines[i]),
                self.time_field,
            )
        self._prev = (float(t[-1]), int(lines[-1]), raw_t[-1])

    def frame(self, id_prefix: str = "") -> pd.DataFrame:
        """Concatenate the chunks, apply sort/window/head, re-zero time, and attach the report."""
        cols = {k: np.concatenate([p[k] for p in self.parts]) for k in self.parts[0]} if self.parts else {}
        if not cols or len(cols["arrival_time"]) == 0 and self.n_seen == 0:
            skipped = self.policy.skipped.count
            why = f" ({skipped} bad row(s) skipped)" if skipped else ""
            raise TraceError(f"no valid data rows{why}", self.file, None, None)
        if self.opts.sort:
            order = np.argsort(cols["arrival_time"], kind="stable")
            cols = {k: v[order] for k, v in cols.items()}
        df = _to_frame(
            cols,
            id_prefix,
            base=float(cols["arrival_time"].min()) if self.opts.sort and len(cols["arrival_time"]) else 0.0,
        )
        if self.opts.sort:
            df = _sorted_limits(df, self.opts)
        if self.opts.window is not None:
            df["arrival_time"] -= self.opts.window[0]
        if "_request_id" in df.columns:
            df["request_id"] = df.pop("_request_id").astype("string[pyarrow]")
            self._check_unique_ids(df)
        df = df.drop(columns="_line", errors="ignore")
        df.attrs[ATTR_SOURCE] = self.file
        df.attrs[ATTR_SKIPPED] = self.policy.skipped.as_dict()
        df.attrs[ATTR_FILTERED] = self.filtered
        self.policy.skipped.warn()
        return df

    def _check_unique_ids(self, df: pd.DataFrame) -> None:
        """A repeated request id is named with the line that repeats it."""
        dup = df["request_id"].duplicated().to_numpy()
        if dup.any():
            i = int(np.flatnonzero(dup)[0])
            raise TraceError(
                f"duplicate request id {df['request_id'].iloc[i]!r}",
                self.file,
                int(df["_line"].iloc[i]),
                "request_id",
            )


def _to_frame(cols: dict[str, np.ndarray], id_prefix: str, base: float) -> pd.DataFrame:
    """Required columns first, in schema dtypes; ids are the row's ordinal in the file.

    Times arrive relative to the file's first valid row; `base` moves the earliest request of
    the file to 0 (only needed when sorting, since otherwise the first row is the earliest).
    """
    t = cols.pop("arrival_time") - base
    ids = cols.pop("_index")
    data = {
        "request_id": pd.array(
            np.char.add(id_prefix, ids.astype(str)) if len(ids) else [], dtype="string[pyarrow]"
        ),
        "arrival_time": t.astype(np.float64),
        "prompt_tokens": cols.pop("prompt_tokens").astype(np.int64),
        "output_tokens": cols.pop("output_tokens").astype(np.int64),
    }
    df = pd.DataFrame(data)
    for name, values in cols.items():
        df[name] = values
    assert list(df.columns[:4]) == list(REQUIRED_COLUMNS)
    return df


def _sorted_limits(df: pd.DataFrame, opts: LoadOptions) -> pd.DataFrame:
    """Window and head after sorting (which needed the whole file anyway)."""
    if opts.window is not None:
        start, end = opts.window
        t = df["arrival_time"]
        df = df[(t >= start) & (t < end)].reset_index(drop=True)
    if opts.head is not None:
        df = df.head(opts.head).reset_index(drop=True)
    return df
