"""RealExecutor scenarios with hand-written plans: chunked prefill, prefix-cached context, async
placeholders filled on the device, preemption drops, and the errors raised before any launch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from schedsim.backend import ExecutorConfig, RealExecutor  # noqa: E402
from schedsim.policies import Executor, Request, StepPlan  # noqa: E402

BS = 4
PROMPT_A = [11, 42, 7, 99, 3, 250, 18]
PROMPT_B = [11, 42, 7, 99, 61, 5]  # shares A's first block


@pytest.fixture(scope="module")
def executor_factory():
    """Fresh executors over one shared model (its dense forward is the reference)."""
    base = RealExecutor.from_config(
        ExecutorConfig(model="tiny", block_size=BS, num_blocks=32, seed=5, dtype="fp32")
    )  # exact greedy equality: fp32 on CUDA too

    def make() -> RealExecutor:
        return RealExecutor(base.model, base.config)

    return make


def greedy(ex: RealExecutor, prompt: list[int], n: int) -> list[int]:
    """The dense, cache-free greedy continuation."""
    return ex.model.greedy_reference(prompt, n)


def plan(step: int, sched: dict[str, tuple[int, int]], tables: dict[str, list[int]], **ids) -> StepPlan:
    """A plan from {rid: (context, num_tokens)}."""
    return StepPlan(
        step_id=step,
        num_scheduled_tokens={r: n for r, (_, n) in sched.items()},
        total_num_scheduled_tokens=sum(n for _, n in sched.values()),
        context_lens={r: c for r, (c, _) in sched.items()},
        block_ids={r: tables[r] for r in sched},
        **ids,
    )


def req(rid: str, prompt: list[int]) -> Request:
    return Request(rid, 0.0, len(prompt), 8, prompt_token_ids=list(prompt))


def test_executor_protocol_and_chunked_prefill_samples_only_at_the_end(executor_factory):
    ex = executor_factory()
    assert isinstance(ex, Executor)
    a = req("a", PROMPT_A)
    tables = {"a": [3, 9]}
    r1 = ex.collect(ex.launch(plan(0, {"a": (0, 4)}, tables, new_req_ids=["a"]), {"a": a}))
    assert r1.sampled_token_ids == {"a": []}  # the chunk does not reach the last prompt token
    r2 = ex.collect(ex.launch(plan(1, {"a": (4, 3)}, tables), {"a": a}))
    want = greedy(ex, PROMPT_A, 3)
    assert r2.sampled_token_ids == {"a": want[:1]} and r2.step_id == 1
    a.output_token_ids += r2.sampled_token_ids["a"]
    r3 = ex.collect(ex.launch(plan(2, {"a": (7, 1)}, tables), {"a": a}))  # sync decode
    assert r3.sampled_token_ids == {"a": want[1:2]}


def test_prefix_cached_context_is_read_from_the_shared_block(executor_factory):
    ex = executor_factory()
    a, b = req("a", PROMPT_A), req("b", PROMPT_B)
    tables = {"a": [3, 9], "b": [3, 12]}
    ex.collect(ex.launch(plan(0, {"a": (0, 7)}, tables, new_req_ids=["a"]), {"a": a}))
    # b's first block is a prefix-cache hit: only its last two tokens are computed.
    hit = ex.collect(ex.launch(plan(1, {"b": (4, 2)}, tables, new_req_ids=["b"]), {"b": b}))
    assert hit.sampled_token_ids == {"b": greedy(ex, PROMPT_B, 1)}
    # Control: with the shared block overwritten (seeded), the same plan yields another token.
    ex2 = executor_factory()
    g = torch.Generator().manual_seed(0)
    for k_cache, v_cache in ex2.cache.layers:
        k_cache[3].copy_(torch.randn(k_cache[3].shape, generator=g) * 3)
        v_cache[3].copy_(torch.randn(v_cache[3].shape, generator=g) * 3)
    miss = ex2.collect(ex2.launch(plan(0, {"b": (4, 2)}, tables, new_req_ids=["b"]), {"b": b}))
    assert miss.sampled_token_ids != hit.sampled_token_ids


def test_async_placeholders_are_filled_on_device_by_slice_then_scatter(executor_factory):
    ex = executor_factory()
    a, b = req("a", PROMPT_A), req("b", PROMPT_B)
    live = {"a": a, "b": b}
    tables = {"a": [3, 9, 4], "b": [5, 12, 6]}
    want_a, want_b = greedy(ex, PROMPT_A, 3), greedy(ex, PROMPT_B, 2)
    h0 = ex.launch(plan(0, {"a": (0, 7), "b": (0, 6)}, tables, new_req_ids=["a", "b"]), live)
    # Step 1 is launched before step 0 is collected: both inputs are step 0's sampled tokens.
    h1 = ex.launch(plan(1, {"a": (7, 1), "b": (6, 1)}, tables), live)
    assert ex.num_fill_slices == 1 and ex.num_fill_scatters == 0  # batch unchanged: slice copy
    r0 = ex.collect(h0)
    a.output_token_ids += r0.sampled_token_ids["a"]
    b.output_token_ids += r0.sampled_token_ids["b"]
    # Step 2: b is first now and a second, so the device scatters step 1's tokens into place.
    h2 = ex.launch(plan(2, {"b": (7, 1), "a": (8, 1)}, tables), live)
    assert ex.num_fill_scatters == 1
    r1, r2 = ex.collect(h1), ex.collect(h2)
    assert [r.sampled_token_ids["a"][0] for r in (r0, r1, r2)] == want_a
    assert [r.sampled_token_ids["b"][0] for r in (r0, r1)] == want_b


def test_preempted_request_is_dropped_and_recomputed_from_known_tokens(executor_factory):
    ex = executor_factory()
    a = req("a", PROMPT_A)
    tables = {"a": [3, 9]}
    h0 = ex.launch(plan(0, {"a": (0, 7)}, tables, new_req_ids=["a"]), {"a": a})
    h1 = ex.launch(plan(1, {"a": (7, 1)}, tables), {"a": a})  # in flight when preempted
    ex.launch(plan(2, {}, tables, preempted_req_ids=["a"]), {"a": a})
    assert "a" not in ex.states
    a.output_token_ids += ex.collect(h0).sampled_token_ids["a"]
    ex.collect(h1)  # stale: the scheduler discards it
    # Resumed on other blocks: prompt + the one known output recomputed, the next token drawn.
    r = ex.collect(ex.launch(plan(3, {"a": (0, 8)}, {"a": [7, 2]}, resumed_req_ids=["a"]), {"a": a}))
    assert a.output_token_ids + r.sampled_token_ids["a"] == greedy(ex, PROMPT_A, 2)


def test_bad_plans_are_refused_before_launch(executor_factory):
    ex = executor_factory()
    a = req("a", PROMPT_A)
    with pytest.raises(ValueError, match="only 7 tokens exist"):
        ex.launch(plan(0, {"a": (0, 8)}, {"a": [3, 9]}), {"a": a})
    with pytest.raises(ValueError, match=r"request a: block ids \[40\] outside 1\.\.31"):
        ex.launch(plan(0, {"a": (0, 7)}, {"a": [3, 40]}), {"a": a})
    with pytest.raises(ValueError, match="7 tokens need 2"):
        ex.launch(plan(0, {"a": (0, 7)}, {"a": [3]}), {"a": a})
    with pytest.raises(ValueError, match=r"prompt token ids \[9999\] outside the model's vocabulary"):
        ex.launch(plan(0, {"v": (0, 2)}, {"v": [3]}, new_req_ids=["v"]), {"v": req("v", [5, 9999])})
    far = req("far", [5] * 4100)
    with pytest.raises(ValueError, match="beyond the model's max_position_embeddings 4096"):
        ex.launch(plan(0, {"far": (0, 4100)}, {"far": list(range(1, 32)) * 40}), {"far": far})
    with pytest.raises(ValueError, match="needs prompt_token_ids"):
        ex.launch(plan(0, {"x": (0, 3)}, {"x": [3]}), {"x": Request("x", 0.0, 3, 4)})
    spec = plan(0, {"a": (0, 7)}, {"a": [3, 9]}, spec_decode_tokens={"a": [-1]})
    with pytest.raises(ValueError, match="speculative decoding"):
        ex.launch(spec, {"a": a})
    with pytest.raises(ValueError, match="ExecutorConfig.device"):
        ExecutorConfig(device="tpu")
    assert ex.collect(ex.launch(StepPlan.make_empty(), {})).sampled_token_ids == {}
