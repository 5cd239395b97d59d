"""metrics_rows.StepRows: step -> row of the ordinary steps' columns, and the jumps' rows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.metrics.column import Column
from schedsim.metrics.recorder import STEP_FIELDS, STEP_TYPES
from schedsim.metrics.rows import StepRows

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

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
    assert np.flatnonzero(rows.jump_mask(len(kinds))).tolist() == [s for s, r in enumerate(kinds) if r < 0]


@settings(max_examples=60, deadline=None)
@given(_ORDER, st.data())
def test_place_puts_ordinary_rows_around_zeroed_jumps_then_the_late_writes(
    order: list[int], data: st.DataObject
) -> None:
    rows, kinds = _build(order)
    n_ord = sum(1 for r in kinds if r >= 0)
    cols = {name: Column(STEP_TYPES.get(name, "i")) for name in STEP_FIELDS}
    cols["start"].extend([float(j) for j in range(n_ord)])
    cols["num_decode_reqs"].extend(list(range(1, n_ord + 1)))
    cols["num_finished"].extend([1] * n_ord)
    for name in STEP_FIELDS:  # every column one value a row, as the recorder's
        if len(cols[name]) < n_ord:
            cols[name].extend([0] * n_ord)
    start = [float(r) if r >= 0 else 0.0 for r in kinds]
    decode = [r + 1 if r >= 0 else 0 for r in kinds]
    finished = [1 if r >= 0 else 0 for r in kinds]
    jumps = [s for s, r in enumerate(kinds) if r < 0]
    for s in data.draw(st.lists(st.sampled_from(jumps), max_size=5)) if jumps else []:
        rows.write_done(
            SimpleNamespace(  # on_step_done of a jump's step: set
                step=s,
                start=0.5 + s,
                end=0.0,
                gpu_time=0.0,
                num_prefill_reqs=0,
                num_decode_reqs=3,
                num_prefill_tokens=0,
                num_decode_tokens=0,
                num_spec_tokens=0,
                defer_sampling=0,
            )
        )
        rows.add_finished(s, 2)  # added twice where drawn twice
        start[s], decode[s] = 0.5 + s, 3
        finished[s] += 2
    full = rows.place(cols)
    assert full["start"].tolist() == start and full["num_decode_reqs"].dtype == np.int32
    assert full["num_decode_reqs"].tolist() == decode
    assert full["num_finished"].tolist() == finished
    again = rows.place(cols)  # once: the same full columns, the writes not applied twice
    assert again["num_finished"].tolist() == finished
    if kinds:  # the Column's own array, grown (no copy of the table)
        assert np.shares_memory(full["start"], np.frombuffer(cols["start"].data))
