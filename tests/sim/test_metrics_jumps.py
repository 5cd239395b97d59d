"""The deferred jump rows (metrics_jumps): merging at positions, and rows expanded from a record.

The fast-forward equality tests compare whole tables with jumps on and off; these pin the two
pieces that could go wrong on their own: where merged rows land, and the rows a record expands to.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.metrics_jumps import COSTS, META, JumpChunks, fill_jump_steps, jump_timeline_rows, merge_at


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 99), max_size=30), st.data())
def test_merge_at_inserts_each_row_before_its_position(stream: list[int], data: st.DataObject) -> None:
    """Row i goes before the stream's row at[i], after earlier inserted rows (list insertion)."""
    at = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    rows = [1000 + i for i in range(len(at))]
    expected: list[int] = []
    inserted = 0
    for pos in range(len(stream) + 1):
        while inserted < len(at) and at[inserted] == pos:
            expected.append(rows[inserted])
            inserted += 1
        if pos < len(stream):
            expected.append(stream[pos])
    (got,) = merge_at([np.array(stream, dtype=np.int64)], [np.array(rows, dtype=np.int64)],
                      np.array(at, dtype=np.int64))
    assert got.tolist() == expected
    assert got.dtype == np.int64


def _record(k: int, is_async: bool, d0: float) -> JumpChunks:
    """One jump of k iterations at step 10, with times field f, iteration i = 100 f + i."""
    ch = JumpChunks()
    fields = [[100.0 * f + i for i in range(k)] for f in range(10)]
    meta = dict(cpu_pos=7, gpu_pos=3, idx0=10, k=k, lag=int(is_async), n=4, n_last=3)
    costs = dict(s=1.0, p=1.0, d0=d0, u0=1.0, d=1.0, u=1.0, s_last=1.0, p_last=0.0)
    ch.add([meta[m] for m in META], [costs[c] for c in COSTS], fields)
    return ch


def test_jump_steps_rows() -> None:
    """Times from their fields, the batch of the last iteration its own, nothing else touched."""
    ch = _record(3, False, 1.0)
    names = ("schedule_time", "start", "end", "gpu_time", "kv_usage", "num_running",
             "num_decode_reqs", "num_decode_tokens", "num_prefill_reqs")
    cols = {n: np.zeros(14) for n in names}
    fill_jump_steps(ch, cols)
    assert cols["schedule_time"][10:13].tolist() == [100.0, 101.0, 102.0]  # field 1 (sched)
    assert cols["kv_usage"][10:13].tolist() == [900.0, 901.0, 902.0]  # field 9
    assert cols["num_running"][10:13].tolist() == [4, 4, 4]
    assert cols["num_decode_reqs"][10:13].tolist() == [4, 4, 3]
    assert not cols["num_prefill_reqs"].any() and not cols["start"][:10].any()


def test_jump_timeline_rows_phases_and_steps() -> None:
    """Per iteration schedule, prepare, d2h, update (cost > 0 only), d2h/update for the step before
    under a batch queue, at the jump's stream positions."""
    ch = _record(2, True, 0.0)  # no d2h in the first iteration, no prepare in the last
    kinds = (1, 2, 3, 4)
    (kind, start, end, step), cpu_at, (gs, ge, gstep), gpu_at = jump_timeline_rows(ch, kinds)
    assert kind.tolist() == [1, 2, 4, 1, 3, 4]
    assert step.tolist() == [10, 10, 9, 11, 10, 10]
    assert start.tolist() == [0.0, 100.0, 700.0, 1.0, 601.0, 701.0]  # poll, sched, d2h | wait, d2h
    assert end.tolist() == [100.0, 200.0, 800.0, 101.0, 701.0, 801.0]
    assert cpu_at.tolist() == [7] * 6 and gpu_at.tolist() == [3, 3]
    assert gs.tolist() == [300.0, 301.0] and ge.tolist() == [400.0, 401.0]
    assert gstep.tolist() == [10, 11]
