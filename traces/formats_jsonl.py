"""JSON-lines formats: Mooncake FAST'25 traces and mapped generic JSONL (incl. the native form)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from .collect import Collector, LoadOptions
from .columns import MISSING, ChunkCheck, to_number, to_seconds, to_tokens
from .errors import TraceError
from .reading import RowPolicy, iter_jsonl
from .schema import OPTIONAL_COLUMNS
from .validate import normalize

MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
MOONCAKE_BLOCK = 512
HASHES_KEY = re.compile(r"^prompt_block_hashes(?:@(\d+))?$")
CHUNK_RECORDS = 50_000


def _chunks(
    path: Path, policy: RowPolicy, keys: list[str], size: int, exact: bool
) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
    """Group records into column arrays; unknown keys are errors for fixed formats."""
    cols: dict[str, list[object]] = {k: [] for k in keys}
    lines: list[int] = []
    allowed = set(keys)
    for line, rec in iter_jsonl(path, policy):
        if exact and not allowed.issuperset(rec):
            extra = sorted(set(rec) - allowed)
            policy.bad(line, extra[0], f"unexpected key(s) {extra}; expected {sorted(allowed)}")
            continue
        for k in keys:
            cols[k].append(rec.get(k, MISSING))
        lines.append(line)
        if len(lines) >= size:
            yield {k: _objects(v) for k, v in cols.items()}, np.asarray(lines, np.int64)
            cols, lines = {k: [] for k in keys}, []
    if lines:
        yield {k: _objects(v) for k, v in cols.items()}, np.asarray(lines, np.int64)


def _objects(values: list[object]) -> np.ndarray:
    """An object array that never tries to broadcast nested lists."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _hash_ids(
    raw: np.ndarray, field: str, check: ChunkCheck, prompt: np.ndarray, block: int | None, missing_ok: bool
) -> np.ndarray:
    """Lists of ints; for Mooncake also floor..ceil(input_length / 512) entries long."""
    out = np.empty(len(raw), dtype=object)
    bad = np.zeros(len(raw), dtype=bool)
    reasons: dict[int, str] = {}
    for i, v in enumerate(raw):
        if (v is MISSING or v is None) and missing_ok:
            out[i] = None
        elif v is MISSING:
            bad[i], reasons[i] = True, "missing key"
        elif not isinstance(v, list) or not all(type(x) is int for x in v):
            bad[i], reasons[i] = True, f"expected a list of integers, got {repr(v)[:40]}"
        elif block and prompt[i] > 0 and not (prompt[i] // block <= len(v) <= -(-prompt[i] // block)):
            bad[i] = True
            reasons[i] = (
                f"{len(v)} hash ids for {prompt[i]} prompt tokens: need "
                f"{-(-prompt[i] // block)} blocks of {block}"
            )
        else:
            out[i] = tuple(v)
    check.flag(bad, field, lambda i: reasons[i])
    return out


def _timed(
    coll: Collector,
    raw: dict[str, np.ndarray],
    lines: np.ndarray,
    key: str,
    unit: str,
    origin: list[float | int | None],
) -> tuple[dict[str, np.ndarray], np.ndarray, ChunkCheck, np.ndarray]:
    """Convert the time key first, and cut the chunk where a window read may stop."""
    check = ChunkCheck(lines, coll.policy)
    t = to_seconds(raw[key], key, check, unit, origin, json_types=True)
    cut = coll.window_cut(t, check.bad)
    if cut < len(t):
        raw, lines = {k: v[:cut] for k, v in raw.items()}, lines[:cut]
        check = ChunkCheck(lines, coll.policy)
        t = to_seconds(raw[key], key, check, unit, origin, json_types=True)
    return raw, lines, check, t


def load_mooncake(
    path: str | Path,
    *,
    skip_bad: bool = False,
    sort: bool = False,
    head: int | None = None,
    window: tuple[float, float] | None = None,
) -> pd.DataFrame:
    """Mooncake FAST'25 JSONL: ms timestamps, 512-token hash ids kept as prompt block hashes."""
    path = Path(path)
    coll = Collector(str(path), "timestamp", LoadOptions(skip_bad, sort, head, window))
    origin: list[float | int | None] = [None]
    for raw, lines in _chunks(
        path, coll.policy, list(MOONCAKE_KEYS), coll.chunk_rows(CHUNK_RECORDS), exact=True
    ):
        raw, lines, check, t = _timed(coll, raw, lines, "timestamp", "ms", origin)
        prompt = to_tokens(raw["input_length"], "input_length", check, json_types=True)
        out = to_tokens(raw["output_length"], "output_length", check, json_types=True)
        hashes = _hash_ids(raw["hash_ids"], "hash_ids", check, prompt, MOONCAKE_BLOCK, False)
        keep = check.finish()
        cols = {
            "prompt_tokens": prompt[keep],
            "output_tokens": out[keep],
            "prompt_block_hashes": hashes[keep],
        }
        if not coll.add(t[keep], raw["timestamp"][keep], lines[keep], cols):
            break
    df = coll.frame()
    df.attrs.update({"format": "mooncake", "prefix_block_size": MOONCAKE_BLOCK})
    return normalize(df)


def load_jsonl(
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
    """Any JSONL, given `mapping` {workload column: key}; identity for the native format."""
    path = Path(path)
    keys = _key_map(path, mapping or {})
    m = HASHES_KEY.match(keys.get("prompt_block_hashes", ""))
    block_size = block_size or (int(m.group(1)) if m and m.group(1) else None)
    coll = Collector(str(path), keys["arrival_time"], LoadOptions(skip_bad, sort, head, window))
    origin: list[float | int | None] = [None]
    src = list(dict.fromkeys(keys.values()))
    for raw, lines in _chunks(path, coll.policy, src, coll.chunk_rows(CHUNK_RECORDS), exact=False):
        raw, lines, check, t = _timed(coll, raw, lines, keys["arrival_time"], time_unit, origin)
        cols = {
            c: to_tokens(raw[keys[c]], keys[c], check, json_types=True)
            for c in ("prompt_tokens", "output_tokens")
        }
        for col, key in keys.items():
            if col in OPTIONAL_COLUMNS or col == "request_id":
                cols[col] = _json_optional(col, raw[key], key, check, cols["prompt_tokens"], block_size)
        keep = check.finish()
        if not coll.add(
            t[keep],
            raw[keys["arrival_time"]][keep],
            lines[keep],
            {("_request_id" if k == "request_id" else k): v[keep] for k, v in cols.items()},
        ):
            break
    df = coll.frame()
    df.attrs["format"] = "jsonl"
    if block_size and "prompt_block_hashes" in df.columns:
        df.attrs["prefix_block_size"] = block_size
    return normalize(df)


def _key_map(path: Path, mapping: dict[str, str]) -> dict[str, str]:
    """Mapped keys win; the first record's keys fill unmapped Workload columns by name."""
    keys = dict(mapping)
    for _, rec in iter_jsonl(path, RowPolicy(str(path), skip_bad=True)):
        for name in rec:
            if HASHES_KEY.match(name):
                keys.setdefault("prompt_block_hashes", name)
            elif name in OPTIONAL_COLUMNS or name == "request_id":
                keys.setdefault(name, name)
        break
    else:
        raise TraceError("file is empty (no JSON records)", str(path), 1)
    for req in ("arrival_time", "prompt_tokens", "output_tokens"):
        keys.setdefault(req, req)
    return keys


def _json_optional(
    col: str, raw: np.ndarray, key: str, check: ChunkCheck, prompt: np.ndarray, block: int | None
) -> np.ndarray:
    """Optional columns from JSON: null or absent means unset."""
    unset = np.fromiter((v is None or v is MISSING for v in raw), bool, len(raw))
    if col == "prompt_block_hashes":
        return _hash_ids(raw, key, check, prompt, None, True)
    if col in ("request_id", "session_id", "request_class"):
        wrong = (
            np.fromiter(
                (not (isinstance(v, str | int) and not isinstance(v, bool)) for v in raw), bool, len(raw)
            )
            & ~unset
        )
        check.flag(wrong, key, lambda i: f"expected a string, got {repr(raw[i])[:40]}")
        # numpy's stubs leave None out of ArrayLike; np.where takes it as an object scalar
        return np.where(unset | wrong, None, raw.astype(str))  # type: ignore[call-overload, no-any-return]
    if col == "structured_output":
        wrong = np.fromiter((not isinstance(v, bool) for v in raw), bool, len(raw)) & ~unset
        check.flag(wrong, key, lambda i: f"expected true/false, got {repr(raw[i])[:40]}")
        return np.where(unset | wrong, False, raw).astype(bool)
    num = to_number(np.where(unset, 0, raw), key, check, json_types=True)
    check.flag(num != np.floor(num), key, lambda i: f"not a whole number: {raw[i]!r}")
    if col == "priority":
        return np.where(check.bad, 0, num).astype(np.int64)
    return np.where(unset | check.bad, np.nan, num)
