"""Vectorised field conversion that still names the first offending line and field."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from .errors import MAX_REPORTED_LINES, TraceError
from .reading import RowPolicy, has_bad_utf8

MAX_TOKENS = 2**31 - 1  # anything larger is a corrupted field, not a prompt
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
MISSING = type("Missing", (), {"__repr__": lambda self: "<missing>"})()  # absent JSON key


class ChunkCheck:
    """Collects per-field bad-row masks of one chunk, then raises or skips the earliest first."""

    def __init__(self, lines: np.ndarray, policy: RowPolicy) -> None:
        """One check per chunk: `lines` maps row positions back to the file."""
        self.lines = lines
        self.policy = policy
        self.bad = np.zeros(len(lines), dtype=bool)
        self._flags: list[tuple[np.ndarray, str, Callable[[int], str]]] = []

    def flag(self, mask: np.ndarray, field: str, reason: Callable[[int], str]) -> None:
        """Mark rows whose `field` is bad; the reason is rendered lazily for reported rows only."""
        mask = mask & ~self.bad
        if mask.any():
            self.bad |= mask
            self._flags.append((mask, field, reason))

    def _first_reason(self, i: int) -> tuple[str, str]:
        """The first flag raised on row i: errors report one field, the earliest checked."""
        for mask, field, reason in self._flags:
            if mask[i]:
                return field, reason(i)
        raise AssertionError("row flagged without reason")  # pragma: no cover

    def finish(self) -> np.ndarray:
        """Raise for the earliest bad line (strict) or record skips; returns the keep mask."""
        idx = np.flatnonzero(self.bad)
        if idx.size == 0:
            return ~self.bad
        if not self.policy.skip_bad:
            field, why = self._first_reason(int(idx[0]))
            raise TraceError(why, self.policy.file, int(self.lines[idx[0]]), field)
        ledger = self.policy.skipped
        for i in idx[:MAX_REPORTED_LINES]:
            field, why = self._first_reason(int(i))
            ledger.note(int(self.lines[i]), field, why)
        ledger.count += int(idx.size)
        return ~self.bad


def _describe(raw: object) -> str:
    """Name what is wrong with an unparsable raw value."""
    if raw is MISSING:
        return "missing key"
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return "missing value"
    if isinstance(raw, str) and has_bad_utf8(raw):
        return "not valid UTF-8 (wrong encoding?)"
    if isinstance(raw, bool):
        return f"boolean {raw!r} is not a number"
    text = repr(raw)
    return f"not a number: {text[:40]}"


def to_number(raw: np.ndarray, field: str, check: ChunkCheck, json_types: bool = False) -> np.ndarray:
    """Parse numbers (CSV text, or JSON numbers when `json_types`); flags bad and non-finite ones."""
    arr = raw
    if json_types:
        wrong = np.fromiter(
            (isinstance(v, bool) or not isinstance(v, int | float) for v in arr), bool, len(arr)
        )
        # numpy's stubs leave None out of ArrayLike; np.where takes it as an object scalar
        arr = np.where(wrong, None, arr)  # type: ignore[call-overload]
        check.flag(wrong, field, lambda i: _describe_json(raw[i]))
    num: np.ndarray = pd.to_numeric(pd.Series(arr, dtype=object), errors="coerce").to_numpy(dtype=float)
    check.flag(np.isnan(num), field, lambda i: _describe(arr[i]))
    check.flag(np.isinf(num), field, lambda i: f"not finite: {arr[i]!r}")
    return num


def _describe_json(raw: object) -> str:
    """JSON values of the wrong type are named by their JSON type."""
    if raw is MISSING or raw is None:
        return _describe(raw)
    kind = {bool: "boolean", str: "string", list: "array", dict: "object"}.get(type(raw), "value")
    return f"expected a number, got a JSON {kind}: {repr(raw)[:40]}"


def to_tokens(
    raw: np.ndarray, field: str, check: ChunkCheck, minimum: int = 1, json_types: bool = False
) -> np.ndarray:
    """Token counts: whole numbers in [minimum, 2**31); negative and zero named as such."""
    num = to_number(raw, field, check, json_types)
    with np.errstate(invalid="ignore"):
        check.flag(num < 0, field, lambda i: f"negative token count: {raw[i]!r}")
        check.flag(num < minimum, field, lambda i: f"token count {raw[i]!r} is below {minimum}")
        check.flag(num > MAX_TOKENS, field, lambda i: f"token count {raw[i]!r} is implausibly large")
        check.flag(num != np.floor(num), field, lambda i: f"not a whole number: {raw[i]!r}")
    return np.where(check.bad, 0, num).astype(np.int64)


def to_seconds(
    raw: np.ndarray,
    field: str,
    check: ChunkCheck,
    unit: str,
    origin: list[float | int | None],
    json_types: bool = False,
) -> np.ndarray:
    """Timestamps as float seconds after `origin` (set from the first valid value, kept in the
    file's own unit so that nanosecond datetimes lose no precision)."""
    if unit == "datetime":
        ser = pd.to_datetime(pd.Series(raw, dtype=object), format="ISO8601", errors="coerce", utc=True)
        bad = ser.isna().to_numpy()
        ns = np.where(bad, 0, ser.to_numpy(dtype="datetime64[ns]").astype(np.int64))
        check.flag(bad, field, lambda i: f"unparsable timestamp: {_describe_text(raw[i])}")
        return _relative(ns, check.bad, origin) / 1e9
    if unit not in TIME_UNITS:
        raise TraceError(
            f"unknown time unit {unit!r}; use one of {sorted(TIME_UNITS)} or datetime",
            check.policy.file,
            None,
            field,
        )
    num = to_number(raw, field, check, json_types)
    with np.errstate(invalid="ignore"):
        check.flag(num < 0, field, lambda i: f"negative timestamp: {raw[i]!r}")
    return _relative(np.where(check.bad, 0.0, num), check.bad, origin) * TIME_UNITS[unit]


def _relative(values: np.ndarray, bad: np.ndarray, origin: list[float | int | None]) -> np.ndarray:
    """Subtract the file's origin (its first valid timestamp) before any float rounding."""
    if origin[0] is None:
        good = np.flatnonzero(~bad)
        if good.size == 0:
            return values.astype(np.float64)
        origin[0] = values[good[0]].item()
    return (values - origin[0]).astype(np.float64)


def _describe_text(raw: object) -> str:
    """Like _describe, but an unparsable string is shown as itself."""
    if isinstance(raw, str) and raw.strip() and not has_bad_utf8(raw):
        return repr(raw)[:40]
    return _describe(raw)


def to_text(raw: np.ndarray, field: str, check: ChunkCheck) -> np.ndarray:
    """Free-text fields (model names, ids): only wrong encodings are errors."""
    arr = np.asarray(raw, dtype=object)
    bad = np.fromiter((isinstance(v, str) and has_bad_utf8(v) for v in arr), bool, len(arr))
    check.flag(bad, field, lambda i: "not valid UTF-8 (wrong encoding?)")
    return arr
