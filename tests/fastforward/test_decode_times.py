"""The fast-forward's GPU step times are the executor's: DecodeTimes against step_time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.fastforward.timeline import DecodeTimes
from schedsim.latency import StepShape, make_latency_model
from support.schedloop import running_requests

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


class _ShapeOnly:
    """A latency model with no closed form for plain decodes (DecodeTimes builds each shape)."""

    def __init__(self) -> None:
        self.inner = make_latency_model("llama-3.1-8b", "h100", kind="roofline")

    def step_time(self, shape: StepShape) -> float:
        return self.inner.step_time(shape) * 1.5


@pytest.mark.parametrize(
    "make",
    [
        lambda: make_latency_model("llama-3.1-8b", "h100", kind="roofline"),  # the native call
        lambda: make_latency_model("llama-2-7b", "a100-80gb", kind="table"),  # its own closed form
        _ShapeOnly,
    ],
)
@settings(max_examples=25, deadline=None)
@given(ctx=st.lists(st.integers(1, 20000), min_size=1, max_size=40), i=st.integers(0, 300))
def test_decode_times_equal_step_time_of_that_shape(make, ctx: list[int], i: int) -> None:
    model = make()
    expected = model.step_time(StepShape(decodes=[(c + i, 0) for c in ctx]))
    assert DecodeTimes(model, running_requests(ctx)).at(i) == expected  # the very float, not an approximation
