"""Streaming readers that keep the physical line number of every row, for errors that point."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO

from .errors import SkippedRows, TraceError

CHUNK_ROWS = 200_000
_FOREIGN_BOMS = {
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe": "UTF-16",
    b"\xfe\xff": "UTF-16",
}


@dataclass
class RowPolicy:
    """Strict (raise at the first bad row) or lenient (skip and count): the caller decides."""

    file: str
    skip_bad: bool = False

    def __post_init__(self) -> None:
        """One ledger per load, so the report covers the whole file."""
        self.skipped = SkippedRows(self.file)

    def bad(self, line: int, field: str | None, reason: str) -> None:
        """Raise, or record the row as skipped when the caller opted in."""
        if not self.skip_bad:
            raise TraceError(reason, self.file, line, field)
        self.skipped.add(line, field or "<row>", reason)


def open_binary(path: Path) -> io.BufferedReader | gzip.GzipFile:
    """Open plain or gzip files alike; missing files become TraceError, not OSError."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - returned to the caller
    except OSError as exc:
        raise TraceError(f"cannot open: {exc.strerror or exc}", str(path)) from None
    if path.suffix == ".gz":
        return gzip.open(raw, "rb")
    return raw


def check_encoding(path: Path, head: bytes) -> None:
    """Reject UTF-16/32 up front: their bytes would otherwise surface as baffling field errors."""
    for bom, name in _FOREIGN_BOMS.items():
        if head.startswith(bom):
            raise TraceError(
                f"file is {name}-encoded (byte-order mark {bom.hex(' ')}); re-encode it as UTF-8",
                str(path),
                1,
            )
    if b"\x00" in head[:4096]:
        raise TraceError(
            "file contains NUL bytes: binary data or a UTF-16 file without BOM",
            str(path),
            head[: head.index(b"\x00")].count(b"\n") + 1,
        )


def has_bad_utf8(text: str) -> bool:
    """True when decoding met bytes that are not UTF-8 (kept as lone surrogates)."""
    return any("\udc80" <= ch <= "\udcff" for ch in text)


def _text_stream(path: Path) -> IO[str]:
    """UTF-8 text with undecodable bytes kept as surrogates, so we can blame the exact field."""
    raw = open_binary(path)
    try:
        head = raw.peek(4096)
    except (OSError, EOFError) as exc:
        raise TraceError(f"unreadable compressed file: {exc}", str(path)) from None
    check_encoding(path, head)
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")


def read_csv_header(path: Path) -> tuple[list[str], int]:
    """First non-blank row and its line number; an empty file is an error, not zero rows."""
    with _text_stream(path) as fh:
        reader = csv.reader(fh)
        try:
            for row in reader:
                if row and any(cell.strip() for cell in row):
                    if has_bad_utf8(",".join(row)):
                        raise TraceError("header is not valid UTF-8", str(path), reader.line_num)
                    return [c.strip() for c in row], reader.line_num
        except csv.Error as exc:
            raise TraceError(f"unreadable CSV: {exc}", str(path), reader.line_num + 1) from None
        except (OSError, EOFError) as exc:
            raise TraceError(f"unreadable file: {exc}", str(path)) from None
    raise TraceError("file is empty (no header row)", str(path), 1)


def iter_csv_chunks(
    path: Path, policy: RowPolicy, chunk_rows: int = CHUNK_ROWS
) -> Iterator[tuple[list[list[str]], list[int]]]:
    """Yield (columns, line numbers) of well-shaped data rows; misshapen rows go to the policy.

    Rows are pulled in C-speed slices; a slice whose rows each took one physical line (the
    usual case) gets its line numbers arithmetically, others are counted record by record.
    """
    _header, header_line = read_csv_header(path)
    width = len(_header)
    with _text_stream(path) as fh:
        reader = csv.reader(fh)
        try:
            while reader.line_num < header_line:
                next(reader)
            while True:
                before = reader.line_num
                rows = list(islice(reader, chunk_rows))
                if not rows:
                    return
                lines = _row_lines(rows, before, reader.line_num)
                good, good_lines = _shape_filter(rows, lines, width, policy)
                if good:
                    yield [list(col) for col in zip(*good, strict=True)], good_lines
        except csv.Error as exc:
            raise TraceError(
                f"unreadable CSV (an unbalanced quote earlier can cause this): {exc}",
                str(path),
                reader.line_num,
            ) from None
        except (OSError, EOFError) as exc:
            raise TraceError(f"unreadable file: {exc}", str(path)) from None


def _row_lines(rows: list[list[str]], before: int, after: int) -> list[int]:
    """Line on which each record starts: arithmetic when none spans several lines."""
    if after - before == len(rows):
        return list(range(before + 1, after + 1))
    lines, line = [], before
    for row in rows:
        lines.append(line + 1)
        line += 1 + sum(f.count("\n") + f.count("\r") - f.count("\r\n") for f in row)
    return lines


def _shape_filter(
    rows: list[list[str]], lines: list[int], width: int, policy: RowPolicy
) -> tuple[list[list[str]], list[int]]:
    """Drop blank lines (not rows); rows of the wrong width go to the policy."""
    lens = list(map(len, rows))
    if lens.count(width) == len(rows):
        return rows, lines
    good, good_lines = [], []
    for row, n, line in zip(rows, lens, lines, strict=True):
        if n == 0 or (n == 1 and not row[0].strip()):
            continue
        if n != width:
            policy.bad(line, None, f"row has {n} fields, the header has {width}")
            continue
        good.append(row)
        good_lines.append(line)
    return good, good_lines


def iter_jsonl(path: Path, policy: RowPolicy) -> Iterator[tuple[int, dict[str, object]]]:
    """Yield (line, record) for each JSON object line; broken lines go to the policy."""
    raw = open_binary(path)
    try:
        head = raw.peek(4096)
        check_encoding(path, head)
        last_line = 0
        for last_line, data in enumerate(raw, start=1):
            record = _parse_json_line(path, policy, last_line, data)
            if record is not None:
                yield last_line, record
    except (OSError, EOFError) as exc:
        raise TraceError(f"unreadable file: {exc}", str(path)) from None
    finally:
        raw.close()


def _parse_json_line(path: Path, policy: RowPolicy, line: int, data: bytes) -> dict[str, object] | None:
    """Decode one line; None for blank lines and for bad lines the policy chose to skip."""
    if line == 1 and data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        policy.bad(line, None, f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at column {exc.start + 1})")
        return None
    try:
        record = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        truncated = not data.endswith(b"\n") or "Unterminated" in str(exc) or "Expecting" in str(exc)
        kind = "truncated or invalid JSON" if truncated else "invalid JSON"
        policy.bad(line, None, f"{kind}: {exc}")
        return None
    if not isinstance(record, dict):
        policy.bad(line, None, f"record is a JSON {type(record).__name__}, not an object")
        return None
    return record
