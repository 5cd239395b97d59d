"""plain_step_time: the executor's path for draft-free steps (the decodes as a count and a context
sum) gives the very float step_time gives for the shape with one entry per decode."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from schedsim.latency import RooflineModel, StepShape, make_latency_model
from schedsim.latency.fitted import FittedStepModel
from schedsim.latency.table import TableModel

MODELS = {
    "roofline": make_latency_model("llama-2-7b", "a100-80gb", 1, "roofline", engine="none"),
    "table": make_latency_model("llama-2-7b", "a100-80gb", 1, "table", engine="none"),
    "table+vllm": make_latency_model("llama-2-7b", "a100-80gb", 1, "table", engine="vllm"),
    "roofline+vllm-v0-eager, tp 2": make_latency_model(
        "llama-2-7b", "a100-80gb", 2, "roofline", engine="vllm-v0-eager"
    ),
    "fitted": FittedStepModel(
        {
            "intercept_s": 4e-3,
            "prefill_tokens": 2e-7,
            "decode_count": 3e-5,
            "sum_context": 1e-9,
            "sum_context_sq": 1e-13,
        }
    ),
}
prefill_chunks = st.lists(
    st.tuples(st.integers(1, 900), st.integers(0, 8192)), max_size=4
)  # within the table grid
decode_contexts = st.lists(st.integers(0, 8192), max_size=160)


@pytest.mark.parametrize("name", sorted(MODELS))
@given(prefills=prefill_chunks, contexts=decode_contexts)
@settings(max_examples=60, deadline=None)
def test_plain_step_time_is_step_time(
    name: str, prefills: list[tuple[int, int]], contexts: list[int]
) -> None:
    model = MODELS[name]
    shape = StepShape(prefills, [(c, 0) for c in contexts])
    assert model.plain_step_time(prefills, len(contexts), sum(contexts)) == model.step_time(shape)


@pytest.mark.parametrize("name", ["roofline", "table"])
@given(prefills=prefill_chunks, contexts=decode_contexts)
@settings(max_examples=60, deadline=None)
def test_plain_step_time_sums_the_per_decode_attention(
    name: str, prefills: list[tuple[int, int]], contexts: list[int]
) -> None:
    """The closed form equals the sum over each decode's attention, term by term as before."""
    model = MODELS[name]
    rl: RooflineModel = model.roofline if isinstance(model, TableModel) else model
    decodes = [(c, 0) for c in contexts]
    tokens = sum(n for n, _ in prefills) + len(decodes)
    assume(tokens)
    attn = rl.prefill_attention(prefills) + rl.decode_attention(decodes, 0)
    expected = (
        model.dense_time(tokens) + rl.model.num_layers * attn + rl.head_time(len(prefills) + len(decodes))
    )
    assert model.plain_step_time(prefills, len(decodes), sum(contexts)) == expected
