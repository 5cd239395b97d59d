"""The one error type traces/ raises, and the ledger of rows a caller chose to skip."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

MAX_REPORTED_LINES = 5


class TraceError(ValueError):
    """A malformed input, located precisely so the user can fix the file instead of guessing."""

    def __init__(
        self, message: str, file: str | None = None, line: int | None = None, field: str | None = None
    ) -> None:
        """Keep the parts as attributes so callers and tests need not parse the message."""
        self.message = message
        self.file = file
        self.line = line
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        """Compiler-style location first, so editors and humans can jump to it."""
        where = self.file or "<workload>"
        if self.line is not None:
            where += f":{self.line}"
        what = f" field '{self.field}':" if self.field else ""
        return f"{where}:{what} {self.message}"


class TraceWarning(UserWarning):
    """Raised (as a warning) when rows were skipped on request, so skipping is never silent."""


@dataclass
class SkippedRows:
    """Counts skipped rows and keeps the first few locations: the report `--skip-bad` promises."""

    file: str
    count: int = 0
    first: list[tuple[int, str, str]] = field(default_factory=list)  # (line, field, reason)

    def add(self, line: int, field_name: str, reason: str) -> None:
        """Record one skipped row; only the earliest few are kept verbatim."""
        self.count += 1
        self.note(line, field_name, reason)

    def note(self, line: int, field_name: str, reason: str) -> None:
        """Keep the earliest few by line: structural and value errors arrive out of order."""
        self.first.append((line, field_name, reason))
        if len(self.first) > MAX_REPORTED_LINES:
            self.first.sort(key=lambda entry: entry[0])
            self.first.pop()

    def as_dict(self) -> dict[str, object]:
        """Plain data for DataFrame.attrs (which must stay picklable and JSON-able)."""
        return {
            "count": self.count,
            "first": [{"line": ln, "field": f, "reason": r} for ln, f, r in sorted(self.first)],
        }

    def summary(self) -> str:
        """One line for logs and the CLI."""
        lines = ", ".join(f"{ln} ({f}: {r})" for ln, f, r in sorted(self.first))
        more = " ..." if self.count > len(self.first) else ""
        return f"{self.file}: skipped {self.count} bad row(s); first at line(s) {lines}{more}"

    def warn(self) -> None:
        """Announce the skip; called once per load when anything was skipped."""
        if self.count:
            warnings.warn(self.summary(), TraceWarning, stacklevel=3)
