"""metrics_rows.StepRows: step -> row of the ordinary steps' columns, and the jumps' rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.buffers import Column
from schedsim.metrics_rows import StepRows

# a launch order: each entry an ordinary step (0) or a jump of k steps (k >= 1)
_ORDER = st.lists(st.one_of(st.just(0), st.integers(1, 9)), max_size=40)


def _build(order: list[int]) -> tuple[StepRows, list[int]]:
    """The rows of a launch order, and what each step is: its ordinary row or -1."""
    rows, kinds, step, ordinary = StepRows(), [], 0, 0
    for k in order:
        if k == 0:
            kinds.append(ordinary)
            ordinary += 1
            step += 1
        else:
            rows.add_jump(step, k)
            kinds += [-1] * k
            step += k
    return rows, kinds


@settings(max_examples=80, deadline=None)
@given(_ORDER)
def test_row_of_every_step_earlier_ones_included(order: list[int]) -> None:
    rows, kinds = _build(order)
    assert [rows.row(s) for s in range(len(kinds))] == kinds  # the bisect path for early steps
    assert rows.row(len(kinds)) == len(kinds) - rows.jumped  # the next step, after every jump
    assert np.flatnonzero(rows.jump_mask(len(kinds))).tolist() == [
        s for s, r in enumerate(kinds) if r < 0]


@settings(max_examples=60, deadline=None)
@given(_ORDER, st.data())
def test_place_puts_ordinary_rows_around_zeroed_jumps_then_the_late_writes(
        order: list[int], data: st.DataObject) -> None:
    rows, kinds = _build(order)
    n_ord = sum(1 for r in kinds if r >= 0)
    cols = {"a": Column("i"), "t": Column("d"), "num_finished": Column("i")}
    cols["num_finished"].extend([1] * n_ord)
    expected_f = np.array([1 if r >= 0 else 0 for r in kinds])
    cols["a"].extend(list(range(1, n_ord + 1)))
    cols["t"].extend([float(j) for j in range(n_ord)])
    expected_a = np.array([r + 1 if r >= 0 else 0 for r in kinds], dtype=np.int32)
    jumps = [s for s, r in enumerate(kinds) if r < 0]
    for s in data.draw(st.lists(st.sampled_from(jumps), max_size=5)) if jumps else []:
        rows.write(s, "a", 3, True)  # added twice where drawn twice
        rows.add_finished(s, 2)
        expected_a[s] += 3
        expected_f[s] += 2
    full = rows.place(cols)
    assert full["a"].tolist() == expected_a.tolist() and full["a"].dtype == np.int32
    assert full["t"].tolist() == [float(r) if r >= 0 else 0.0 for r in kinds]
    assert full["num_finished"].tolist() == expected_f.tolist()
    again = rows.place(cols)  # once: the same full columns, the writes not applied twice
    assert again["a"].tolist() == expected_a.tolist()
    if kinds:  # the Column's own array, grown (no copy of the table)
        assert np.shares_memory(full["t"], np.frombuffer(cols["t"].data))
