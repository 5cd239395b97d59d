"""The stretch horizons' block arithmetic (SGLang's pages, TensorRT-LLM's addToken blocks) against
the plain listing of every allocation a stretch makes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.policies.fastforward import allocation_events, allocations_before, first_step_past


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    firsts=st.lists(st.integers(0, 60), min_size=1, max_size=12),
    t=st.integers(1, 80),
    every=st.integers(1, 16),
    room=st.integers(0, 200),
)
def test_allocation_count_and_first_step_past_the_room(
    firsts: list[int], t: int, every: int, room: int
) -> None:
    steps = sorted(i for f in firsts for i in range(f, t, every))  # one entry per allocation
    assert allocations_before(firsts, t, every) == len(steps)
    if len(steps) > room:
        assert first_step_past(firsts, t, every, room) == steps[room]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    bounds=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 80)), min_size=1, max_size=12),
    every=st.integers(1, 16),
)
def test_allocation_events_list_every_allocation_in_step_order(
    bounds: list[tuple[int, int]], every: int
) -> None:
    firsts, stops = [f for f, _ in bounds], [s for _, s in bounds]
    listed = sorted((i, j) for j in range(len(firsts)) for i in range(firsts[j], stops[j], every))
    assert allocation_events(firsts, stops, every) == listed


def test_a_step_with_several_allocations_counts_them_all() -> None:
    # three requests cross a boundary at step 2: with room for two, step 2 is the first short one
    assert allocations_before([2, 2, 2], 3, 4) == 3
    assert first_step_past([2, 2, 2], 3, 4, 2) == 2
    assert first_step_past([0, 2, 2], 3, 4, 0) == 0
