"""Which steps rows the recorder's columns hold: the ordinary steps', not the jumps'.

A fast-forward jump of k iterations has k steps rows, every field of which follows from its
record (metrics_jumps). Reserving them in each of the sixteen steps columns cost more than the
rest of the jump's metrics, so the columns hold only the ordinary steps' rows and `steps_table`
places both kinds. The few writes an ordinary code path makes to a jump's row (the engine's
update of a jump's last, in-flight step, which can finish requests; a jump's own last-update
finishes) are kept aside and applied as they were made before: onto the zeros, ahead of the
jump's own fields.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Final

import numpy as np
from schedsim.metrics.column import Column

DTYPES: Final = {"d": np.float64, "q": np.int64, "i": np.int32, "b": np.int8}  # by typecode


class StepRows:
    """Step index -> row of the steps columns, and the writes into jumps' rows."""

    def __init__(self) -> None:
        self.jumped = 0  # steps jumped so far
        self.start = 0  # the last jump's first step
        self.end = 0  # the step after the last jump: later steps are at step - jumped
        self.firsts = Column("q")  # each jump's first step
        self.cums = Column("q")  # steps jumped up to and including each jump
        self.late: list[tuple[int, str, Any]] = []  # (step, field, value) set in jumps' rows
        # finishes counted in jumps' rows (one a finishing jump: packed, not tuples)
        self.finished_steps, self.finished_n = Column("q"), Column("i")
        self.placed = False  # place() has grown the columns

    def add_jump(self, idx0: int, k: int) -> None:
        """Steps idx0 .. idx0 + k - 1 are a jump's (no rows in the columns)."""
        self.firsts.append(idx0)
        self.jumped += k
        self.cums.append(self.jumped)
        self.start, self.end = idx0, idx0 + k

    def row(self, step: int) -> int:
        """The step's row in the columns; -1 for a jump's step."""
        if step >= self.end:
            return step - self.jumped
        if step >= self.start:  # the last jump's (its finishes, its in-flight step's update)
            return -1
        firsts, cums = self.firsts.array(), self.cums.array()  # an earlier step: rare
        j = bisect_right(firsts, step) - 1
        if j < 0:
            return step
        before = cums[j - 1] if j else 0
        return -1 if step < firsts[j] + cums[j] - before else step - cums[j]

    def add_finished(self, step: int, n: int) -> None:
        """n requests finished in the update of a jump's step."""
        self.finished_steps.append(step)
        self.finished_n.append(n)

    def write_done(self, h: Any) -> None:
        """on_step_done's writes, for a jump's step (h is a SimStep)."""
        step = h.step
        for name, value in (
            ("start", h.start),
            ("end", h.end),
            ("gpu_time", h.gpu_time),
            ("num_prefill_reqs", h.num_prefill_reqs),
            ("num_decode_reqs", h.num_decode_reqs),
            ("num_prefill_tokens", h.num_prefill_tokens),
            ("num_decode_tokens", h.num_decode_tokens),
            ("num_spec_tokens", h.num_spec_tokens),
            ("deferred_sampling", h.defer_sampling),
        ):
            self.late.append((step, name, value))

    def jump_mask(self, total: int) -> Any:
        """Which of `total` steps are jumps' (numpy bool), from +1 at each jump's first step and
        -1 after its last: no array of every jumped step (a 1M-request run jumps 4M)."""
        firsts = np.frombuffer(self.firsts.array(), dtype=np.int64)
        cums = np.frombuffer(self.cums.array(), dtype=np.int64)
        delta = np.zeros(total + 1, dtype=np.int32)
        delta[firsts] += 1  # distinct firsts, distinct ends (jumps do not overlap)
        delta[firsts + np.diff(cums, prepend=0)] -= 1
        return np.cumsum(delta[:-1], dtype=np.int32) > 0

    def place(self, cols: dict[str, Column]) -> dict[str, Any]:
        """Each column at full length, as numpy sharing its array: the jumps' rows zero (the array
        grown in place, no second copy of a 4M-row table), the ordinary rows moved to their
        steps, then the writes into jumps' rows applied in order. Done once; later calls return
        the same views."""
        out: dict[str, Any] = {}
        at: Any = None
        zeros = b""
        for name, col in cols.items():
            a = col.array()
            dtype = DTYPES[a.typecode]
            if self.jumped and not self.placed:
                n = len(a)
                if at is None:
                    at = np.flatnonzero(~self.jump_mask(n + self.jumped))
                    zeros = bytes(8 * self.jumped)  # the widest item's; shared by every column
                ordinary = np.frombuffer(a, dtype=dtype).copy() if n else np.zeros(0, dtype)
                a.frombytes(memoryview(zeros)[: a.itemsize * self.jumped])
                v = np.frombuffer(a, dtype=dtype)
                v[:n] = 0
                v[at] = ordinary
            out[name] = np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)
        if not self.placed:
            for step, field, value in self.late:
                out[field][step] = value
            if len(self.finished_steps):  # adds commute: in any order, as they were made
                np.add.at(
                    out["num_finished"],
                    np.frombuffer(self.finished_steps.array(), dtype=np.int64),
                    np.frombuffer(self.finished_n.array(), dtype=np.int32),
                )
            self.placed = True
        return out
