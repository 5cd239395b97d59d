"""Column: an append-mostly typed column that converts its values in bulk.

The recorder's tables are typed arrays (8 bytes a float, 4 an int: a million-request run writes
tens of millions of values). Appending to an `array.array` one value at a time, or with
`fromlist`, converts each value through PyArg_Parse (about 150 machine instructions a value, an
eighth of a whole run); one `struct.pack` over thousands of values converts each directly. A
Column keeps recent values in a list and packs them into its array every FLUSH values and when
read (`array()`), so memory stays that of the array; random access (a step's row is completed
when the step ends) reads or writes whichever part holds the index.
"""

from __future__ import annotations

import struct
from array import array
from typing import Any, Final

FLUSH: Final = 8192  # values held as Python objects before they are packed


class Column:
    """A typed column (array typecode) filled by append/extend, read as an array at the end."""

    __slots__ = ("typecode", "data", "pending")

    def __init__(self, typecode: str) -> None:
        self.typecode = typecode
        self.data = array(typecode)
        self.pending: list[Any] = []

    def append(self, x: Any) -> None:
        """One value."""
        pending = self.pending
        pending.append(x)
        if len(pending) >= FLUSH:
            self.flush()

    def extend(self, xs: list[Any]) -> None:
        """Several values, in order."""
        pending = self.pending
        pending.extend(xs)
        if len(pending) >= FLUSH:
            self.flush()

    def flush(self) -> None:
        """Pack the pending values into the array."""
        pending = self.pending
        if pending:
            self.data.frombytes(struct.pack(f"{len(pending)}{self.typecode}", *pending))
            pending.clear()

    def array(self) -> array:
        """Every value, as the array (flushed first)."""
        self.flush()
        return self.data

    def __len__(self) -> int:
        return len(self.data) + len(self.pending)

    def __getitem__(self, i: int) -> Any:
        n = len(self.data)
        if i < 0:
            i += n + len(self.pending)
        return self.pending[i - n] if i >= n else self.data[i]

    def __setitem__(self, i: int, value: Any) -> None:
        n = len(self.data)
        if i < 0:
            i += n + len(self.pending)
        if i >= n:
            self.pending[i - n] = value
        else:
            self.data[i] = value
