"""One CSV pipeline behind every CSV format: header check, chunked conversion, filters, collect."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .collect import Collector, LoadOptions
from .columns import ChunkCheck, to_number, to_seconds, to_text, to_tokens
from .errors import TraceError
from .fastcsv import FastPathUnavailable, iter_csv_chunks_fast
from .reading import RowPolicy, iter_csv_chunks, read_csv_header

HASHES_COLUMN = re.compile(r"^prompt_block_hashes(?:@(\d+))?$")
INT_OPTIONALS = ("turn", "max_tokens", "priority", "lora_id")
TEXT_OPTIONALS = ("session_id", "request_class")
_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f", ""}
# a chunk reader: (rows wanted, policy) -> (columns, line numbers) per chunk; the exact reader
# yields lists of strings, the Arrow fast path object arrays
ChunkReader = Callable[
    [int, RowPolicy], Iterator[tuple[list[list[str]] | list[np.ndarray], list[int] | np.ndarray]]
]


@dataclass
class ColumnMap:
    """Which file column feeds which Workload column, plus format-specific rules."""

    arrival_time: str
    prompt_tokens: str
    output_tokens: str
    time_unit: str = "s"  # s, ms, us, ns or datetime
    request_id: str | None = None
    optional: dict[str, str] = field(default_factory=dict)  # workload column -> file column
    exact: bool = False  # extra file columns are an error
    filters: dict[str, set[str]] = field(default_factory=dict)  # file column -> kept values
    min_output: int = 1
    also_required: tuple[str, ...] = ()  # documented columns we check for but do not use
    total_tokens: str | None = None  # must equal prompt + output when given

    def needed(self) -> list[str]:
        """File columns that must exist."""
        base = [self.arrival_time, self.prompt_tokens, self.output_tokens]
        extra = [self.request_id] if self.request_id else []
        extra += [self.total_tokens] if self.total_tokens else []
        names = base + extra + list(self.optional.values()) + list(self.filters)
        return list(dict.fromkeys(names + list(self.also_required)))


def check_header(path: Path, header: list[str], line: int, cmap: ColumnMap) -> dict[str, int]:
    """Missing and (for fixed formats) unexpected columns are named, with the header's line."""
    seen: dict[str, int] = {}
    for i, name in enumerate(header):
        if name in seen:
            raise TraceError("duplicate column in header", str(path), line, name)
        seen[name] = i
    for name in cmap.needed():
        if name not in seen:
            raise TraceError(f"missing column (header has {', '.join(header)})", str(path), line, name)
    if cmap.exact:
        extra = [h for h in header if h not in cmap.needed()]
        if extra:
            raise TraceError(
                f"unexpected column(s) {extra}; expected exactly {cmap.needed()} "
                "(use the generic CSV loader with a column mapping for other layouts)",
                str(path),
                line,
                extra[0],
            )
    return seen


def load_csv_table(
    path: str | Path, cmap: ColumnMap, opts: LoadOptions, block_size: int | None = None, id_prefix: str = ""
) -> pd.DataFrame:
    """Stream a CSV into a Workload: Arrow-speed when the file is plain, exact otherwise."""
    path = Path(path)
    header, header_line = read_csv_header(path)
    where = check_header(path, header, header_line, cmap)
    try:
        return _load(
            path,
            cmap,
            opts,
            where,
            block_size,
            id_prefix,
            lambda n, _policy: iter_csv_chunks_fast(path, header, header_line, n),
        )
    except FastPathUnavailable:
        return _load(
            path, cmap, opts, where, block_size, id_prefix, lambda n, policy: iter_csv_chunks(path, policy, n)
        )


def _load(
    path: Path,
    cmap: ColumnMap,
    opts: LoadOptions,
    where: dict[str, int],
    block_size: int | None,
    id_prefix: str,
    chunks: ChunkReader,
) -> pd.DataFrame:
    """The conversion loop over whichever chunk reader is in use."""
    coll = Collector(str(path), cmap.arrival_time, opts)
    origin: list[float | int | None] = [None]
    for columns, lines in chunks(coll.chunk_rows(200_000), coll.policy):
        raw = {
            name: np.asarray(columns[i], dtype=object) for name, i in where.items() if name in cmap.needed()
        }
        line_arr = np.asarray(lines, dtype=np.int64)
        raw, line_arr = _apply_filters(raw, line_arr, cmap, coll)
        check = ChunkCheck(line_arr, coll.policy)
        t = to_seconds(raw[cmap.arrival_time], cmap.arrival_time, check, cmap.time_unit, origin)
        cut = coll.window_cut(t, check.bad)
        if cut < len(t):
            raw, line_arr = {k: v[:cut] for k, v in raw.items()}, line_arr[:cut]
            check = ChunkCheck(line_arr, coll.policy)
            t = to_seconds(raw[cmap.arrival_time], cmap.arrival_time, check, cmap.time_unit, origin)
        cols = {
            "prompt_tokens": to_tokens(raw[cmap.prompt_tokens], cmap.prompt_tokens, check),
            "output_tokens": to_tokens(raw[cmap.output_tokens], cmap.output_tokens, check, cmap.min_output),
        }
        cols.update(_optionals(raw, cmap, check))
        if cmap.total_tokens:
            _check_total(raw[cmap.total_tokens], cols, cmap.total_tokens, check)
        keep = check.finish()
        more = coll.add(
            t[keep], raw[cmap.arrival_time][keep], line_arr[keep], {k: v[keep] for k, v in cols.items()}
        )
        if not more:
            break
    df = coll.frame(id_prefix)
    if block_size is not None and "prompt_block_hashes" in df.columns:
        df.attrs["prefix_block_size"] = block_size
    return df


def _apply_filters(
    raw: dict[str, np.ndarray], lines: np.ndarray, cmap: ColumnMap, coll: Collector
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Rows outside a requested model/log type are counted as filtered, never as silently lost."""
    if not cmap.filters:
        return raw, lines
    mask = np.ones(len(lines), dtype=bool)
    for name, allowed in cmap.filters.items():
        values = np.char.lower(np.char.strip(raw[name].astype(str)))
        mask &= np.isin(values, [a.strip().lower() for a in allowed])
    coll.filtered += int((~mask).sum())
    return {k: v[mask] for k, v in raw.items()}, lines[mask]


def _optionals(raw: dict[str, np.ndarray], cmap: ColumnMap, check: ChunkCheck) -> dict[str, np.ndarray]:
    """Convert the optional Workload columns a mapping provides."""
    out: dict[str, np.ndarray] = {}
    if cmap.request_id:
        ids = to_text(raw[cmap.request_id], cmap.request_id, check)
        check.flag(_blank(ids), cmap.request_id, lambda i: "missing request id")
        out["_request_id"] = ids
    for col, src in cmap.optional.items():
        values = raw[src]
        if col in TEXT_OPTIONALS:
            text = to_text(values, src, check)
            # numpy's stubs leave None out of ArrayLike; np.where takes it as an object scalar
            out[col] = np.where(_blank(text), None, text)  # type: ignore[call-overload]
        elif col in INT_OPTIONALS:
            out[col] = _ints(values, src, check, col)
        elif col == "structured_output":
            out[col] = _bools(values, src, check)
        elif col == "prompt_block_hashes":
            out[col] = parse_hashes(values, src, check)
        else:
            raise TraceError(f"not a Workload column: {col!r}", check.policy.file, None, src)
    return out


def _blank(values: np.ndarray) -> np.ndarray:
    """Empty CSV cells: unset for optional columns."""
    return np.fromiter((not str(v).strip() for v in values), bool, len(values))


def _check_total(raw: np.ndarray, cols: dict[str, np.ndarray], src: str, check: ChunkCheck) -> None:
    """A total that disagrees with its parts means a corrupted row."""
    total = to_number(raw, src, check)
    parts = cols["prompt_tokens"] + cols["output_tokens"]
    check.flag(total != parts, src, lambda i: f"{raw[i]!r} != prompt + output ({parts[i]})")


def _ints(values: np.ndarray, src: str, check: ChunkCheck, col: str) -> np.ndarray:
    """Nullable ints (empty means unset) for turn/max_tokens/priority/lora_id."""
    empty = np.fromiter((not str(v).strip() for v in values), bool, len(values))
    num = to_number(np.where(empty, "0", values), src, check)
    check.flag(num != np.floor(num), src, lambda i: f"not a whole number: {values[i]!r}")
    if col in ("max_tokens",):
        check.flag(~empty & (num < 1), src, lambda i: f"{col} must be >= 1, got {values[i]!r}")
    out = np.where(check.bad | empty, np.nan, num)
    return out if col != "priority" else np.where(np.isnan(out), 0, out).astype(np.int64)


def _bools(values: np.ndarray, src: str, check: ChunkCheck) -> np.ndarray:
    """Booleans written as true/false/1/0/yes/no."""
    low = np.char.lower(np.char.strip(values.astype(str)))
    bad = ~np.isin(low, list(_TRUE | _FALSE))
    check.flag(bad, src, lambda i: f"not a boolean: {values[i]!r}")
    return np.isin(low, list(_TRUE))


def parse_hashes(values: np.ndarray, src: str, check: ChunkCheck) -> np.ndarray:
    """Space/semicolon-separated ints (the native CSV form); empty means no prefix information."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        text = str(v).replace(";", " ").strip()
        if not text:
            out[i] = None
            continue
        try:
            out[i] = tuple(int(x) for x in text.split())
        except ValueError:
            check.flag(
                np.arange(len(values)) == i, src, lambda j: f"not a list of integers: {str(values[j])[:40]!r}"
            )
            out[i] = None
    return out
