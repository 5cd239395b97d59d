"""Optimistic Arrow-speed CSV reading; gives up (FastPathUnavailable) rather than ever differ.

The week-long Azure files have tens of millions of rows; Python's csv module reads a few
hundred thousand per second. Arrow's streaming reader is far faster but differs on corner cases
(blank lines, multi-line quoted values, bad UTF-8, ragged rows). So this path accepts a file
only when every row is one physical line of exactly the header's width: then row i is on line
header_line + 1 + i exactly. Anything else raises FastPathUnavailable and the caller re-reads
the file with the exact, slower reader, which produces the precise errors.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from .reading import open_binary


class FastPathUnavailable(Exception):  # noqa: N818 - a signal, not an error for users
    """The file needs the exact reader."""


def iter_csv_chunks_fast(
    path: Path, header: list[str], header_line: int, chunk_rows: int
) -> Iterator[tuple[list[np.ndarray], list[int] | np.ndarray]]:
    """Yield (columns as object arrays, line numbers) like `reading.iter_csv_chunks`."""
    if header_line != 1:
        raise FastPathUnavailable
    types = {name: pa.string() for name in header}
    fh = open_binary(path)
    try:
        reader = pacsv.open_csv(
            fh,
            read_options=pacsv.ReadOptions(block_size=1 << 22, use_threads=False),
            parse_options=pacsv.ParseOptions(newlines_in_values=False, ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(
                column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False
            ),
        )
        if reader.schema.names != header:
            raise FastPathUnavailable
        line = header_line + 1
        for batch in reader:
            for column in batch.columns:  # a quoted line break would shift every later line
                if pc.any(pc.match_substring_regex(column, "[\r\n]")).as_py():
                    raise FastPathUnavailable
            for start in range(0, batch.num_rows, chunk_rows):
                part = batch.slice(start, chunk_rows)
                cols = [part.column(i).to_numpy(zero_copy_only=False) for i in range(len(header))]
                blank = np.ones(part.num_rows, dtype=bool)
                for col in cols:
                    blank &= col == ""
                if blank.any():  # a blank line or a row of empty fields: only the exact reader knows
                    raise FastPathUnavailable
                yield cols, np.arange(line, line + part.num_rows)
                line += part.num_rows
    except (pa.ArrowException, OSError, EOFError, UnicodeError) as exc:
        raise FastPathUnavailable from exc
    finally:
        fh.close()
