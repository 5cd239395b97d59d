"""The deferred jump rows (metrics_jumps): where merged rows land, and the rows a record expands to.

The fast-forward equality tests compare whole tables with jumps on and off; these pin the pieces
that could go wrong on their own: where merged rows land in any chunking, and the times and
rows a record expands to.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.metrics.jumps import COSTS, META, JumpChunks, fill_jump_steps, merge_jump_timeline

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def _jumps(ks: list[int], cpu_at: list[int], gpu_at: list[int]) -> JumpChunks:
    """Jumps of ks iterations at stream positions cpu_at / gpu_at, every phase costing 1: jump j
    polls first at 10,000 j, its forward i starts at 10,000 j + 300 + i, its wait i returns at
    10,000 j + 600 + i."""
    ch, step = JumpChunks(), 0
    for j, k in enumerate(ks):
        fields = [
            [10_000.0 * j + 300 + i for i in range(k)],
            [1.0] * k,
            [10_000.0 * j + 600 + i for i in range(k)],
            [0.5] * k,
            [2.0] * k,
        ]
        ch.add([cpu_at[j], gpu_at[j], step, k, 1, 4, 4], [1.0] * (len(COSTS) - 1) + [10_000.0 * j], fields)
        step += k
    return ch


def _cpu_rows(j: int, i: int, step: int) -> list[tuple[int, float, float, int]]:
    """Jump j's iteration i of step `step` (as _jumps): its schedule, prepare, d2h and update
    rows (kind, start, end, step); the d2h and update are the step before's (lag 1)."""
    poll = 10_000.0 * j if i == 0 else 10_000.0 * j + 600 + (i - 1) + 2  # the update before
    wait = 10_000.0 * j + 600 + i
    return [
        (1, poll, poll + 1, step),
        (2, poll + 1, poll + 2, step),
        (3, wait, wait + 1, step - 1),
        (4, wait + 1, wait + 2, step - 1),
    ]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 12), st.integers(0, 5), st.data())
def test_jump_rows_merge_where_appended(n_cpu: int, n_gpu: int, data: st.DataObject) -> None:
    """A jump's rows go, in order, before the stream row it was appended before, after earlier
    jumps' rows; the stream's own rows keep their order (list insertion), in any chunking."""
    ks = data.draw(st.lists(st.integers(1, 4), max_size=6))
    cpu_at = sorted(data.draw(st.lists(st.integers(0, n_cpu), min_size=len(ks), max_size=len(ks))))
    gpu_at = sorted(data.draw(st.lists(st.integers(0, n_gpu), min_size=len(ks), max_size=len(ks))))
    chunk = data.draw(st.integers(1, 8))
    cpu_stream = [(0, -1.0 - r, 0.0, 0) for r in range(n_cpu)]
    gpu_stream = [-1.0 - r for r in range(n_gpu)]
    want_cpu, want_gpu = list(cpu_stream), list(gpu_stream)
    firsts = np.cumsum([0, *ks]).tolist()  # each jump's first step
    for j in reversed(range(len(ks))):
        want_cpu[cpu_at[j] : cpu_at[j]] = [x for i in range(ks[j]) for x in _cpu_rows(j, i, firsts[j] + i)]
        want_gpu[gpu_at[j] : gpu_at[j]] = [10_000.0 * j + 300 + i for i in range(ks[j])]
    cpu = [
        np.zeros(n_cpu, np.int8),
        np.array([r[1] for r in cpu_stream]),
        np.zeros(n_cpu),
        np.zeros(n_cpu, np.int32),
    ]
    gpu = [np.array(gpu_stream), np.zeros(n_gpu), np.zeros(n_gpu, np.int32)]
    got_cpu, got_gpu = merge_jump_timeline(_jumps(ks, cpu_at, gpu_at), cpu, gpu, (1, 2, 3, 4), chunk)
    assert list(zip(*(c.tolist() for c in got_cpu), strict=True)) == want_cpu  # all four columns
    assert got_gpu[0].tolist() == want_gpu
    assert [c.dtype for c in got_cpu] == [np.int8, np.float64, np.float64, np.int32]
    assert cpu == [None] * 4 and gpu == [None] * 3  # each stream array dropped once copied


def _record(k: int, is_async: bool, d0: float) -> JumpChunks:
    """One jump of k iterations at step 10 polling first at 0: forward i starts at 300 + i for
    50, wait i returns at 600 + i, KV usage 900 + i, 5 - i requests waiting; no prepare in the
    last iteration."""
    ch = JumpChunks()
    fields = [
        [300.0 + i for i in range(k)],
        [50.0] * k,
        [600.0 + i for i in range(k)],
        [900.0 + i for i in range(k)],
        [5.0 - i for i in range(k)],
    ]
    meta = dict(cpu_pos=7, gpu_pos=3, idx0=10, k=k, lag=int(is_async), n=4, n_last=3)
    costs = dict(s=1.0, p=1.0, d0=d0, u0=1.0, d=1.0, u=1.0, s_last=1.0, p_last=0.0, poll0=0.0)
    ch.add([meta[m] for m in META], [costs[c] for c in COSTS], fields)
    return ch


def test_jump_steps_rows() -> None:
    """Schedule ends derived from the polls (the update before), the batch of the last iteration
    its own, nothing else touched."""
    ch = _record(3, False, 1.0)
    names = (
        "schedule_time",
        "start",
        "end",
        "gpu_time",
        "kv_usage",
        "num_running",
        "num_waiting",
        "num_decode_reqs",
        "num_decode_tokens",
        "num_prefill_reqs",
    )
    cols = {n: np.zeros(14) for n in names}
    fill_jump_steps(ch, cols)
    assert cols["schedule_time"][10:13].tolist() == [1.0, 603.0, 604.0]  # polls 0, 602, 603
    assert cols["end"][10:13].tolist() == [350.0, 351.0, 352.0]
    assert cols["kv_usage"][10:13].tolist() == [900.0, 901.0, 902.0]
    assert cols["num_running"][10:13].tolist() == [4, 4, 4]
    assert cols["num_waiting"][10:13].tolist() == [5, 4, 3]
    assert cols["num_decode_reqs"][10:13].tolist() == [4, 4, 3]
    assert not cols["num_prefill_reqs"].any() and not cols["start"][:10].any()


def test_jump_timeline_rows_phases_and_steps() -> None:
    """Per iteration schedule, prepare, d2h, update (cost > 0 only), d2h/update for the step before
    under a batch queue, at the jump's stream positions (7 CPU rows and 3 GPU rows before it)."""
    ch = _record(2, True, 0.0)  # no d2h in the first iteration, no prepare in the last
    cpu = [np.full(9, 9, np.int8), np.arange(9.0) - 99, np.zeros(9), np.full(9, -5, np.int32)]
    gpu = [np.arange(4.0) - 99, np.zeros(4), np.full(4, -5, np.int32)]
    (kind, start, end, step), (gs, ge, gstep) = merge_jump_timeline(ch, cpu, gpu, (1, 2, 3, 4))
    assert kind.tolist() == [9] * 7 + [1, 2, 4, 1, 3, 4] + [9] * 2
    assert step[7:13].tolist() == [10, 10, 9, 11, 10, 10]
    assert start[7:13].tolist() == [0.0, 1.0, 600.0, 601.0, 601.0, 602.0]
    assert end[7:13].tolist() == [1.0, 2.0, 601.0, 602.0, 602.0, 603.0]
    assert start[:7].tolist() == list(np.arange(7.0) - 99) and start[13:].tolist() == [-92.0, -91.0]
    assert gs.tolist() == [-99.0, -98.0, -97.0, 300.0, 301.0, -96.0] and ge[3:5].tolist() == [350.0, 351.0]
    assert gstep.tolist() == [-5, -5, -5, 10, 11, -5]


@pytest.mark.parametrize("chunk", [1, 2, 3, 1 << 16])
def test_jump_steps_rows_in_any_chunking(chunk: int) -> None:
    """Three jumps (3, 1 and 2 iterations) fill steps 0-5 the same however they are chunked."""
    cols = {
        n: np.full(6, -1.0)
        for n in (
            "schedule_time",
            "start",
            "end",
            "gpu_time",
            "kv_usage",
            "num_running",
            "num_waiting",
            "num_decode_reqs",
            "num_decode_tokens",
        )
    }
    fill_jump_steps(_jumps([3, 1, 2], [0, 0, 0], [0, 0, 0]), cols, chunk)
    assert cols["schedule_time"].tolist() == [1.0, 603.0, 604.0, 10_001.0, 20_001.0, 20_603.0]
    assert cols["num_running"].tolist() == [4] * 6
    assert cols["num_waiting"].tolist() == [2] * 6


def test_steps_table_needs_the_jumps() -> None:
    """The timeline table releases the jumps' records: the steps table after it is an error."""
    from schedsim.metrics.tables import steps_table

    class _Rec:
        timeline_released = True

    with pytest.raises(RuntimeError, match="after timeline_table"):
        steps_table(_Rec())  # type: ignore[arg-type]
