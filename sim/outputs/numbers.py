"""Numbers as the terminal tables print them: counts as integers with separators (also when a
table's transpose made them floats), other values to 4 significant digits, never `1.447e+04`."""

from __future__ import annotations

import math
import numbers
from typing import Any

# Beyond this a float prints in scientific notation (no table holds such a count or time).
SCIENTIFIC_ABOVE = 1e15


def format_value(value: Any) -> str:
    """One table cell: ints and integral floats of 10,000 and up with separators, other floats to
    4 significant digits, NaN and None as '-', anything else as its str."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    value = float(value)
    if math.isnan(value):
        return "-"
    if math.isfinite(value) and 1e4 <= abs(value) < SCIENTIFIC_ABOVE:
        return f"{value:,.0f}"  # 4 significant digits would print 14470 as 1.447e+04
    return f"{value:,.4g}"
