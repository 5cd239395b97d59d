"""Property tests for sglang-overlap and its switches: KV and request-pool conservation (checked
after every schedule and update), every request finishes with exactly its tokens, determinism."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedsim.policies import make_policy  # noqa: E402
from support.schedloop import check_run

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


SETTINGS = settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

VARIANTS = {
    "overlap": {},
    "no-overlap": {"disable_overlap_schedule": True},
    "mixed-chunk": {"enable_mixed_chunk": True},
    "no-chunking": {"enable_chunked_prefill": False, "max_num_batched_tokens": 40},
    "no-skip-priority": {"enable_skip_finishing_decode": False, "scheduling_policy": "priority"},
    "lpm": {"schedule_policy": "lpm"},
}

MAX_MODEL_LEN = 40
requests_st = st.lists(
    st.tuples(
        st.integers(1, 24), st.integers(1, 40), st.one_of(st.none(), st.integers(0, 40)), st.integers(0, 2)
    ),
    min_size=1,
    max_size=8,
)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@SETTINGS
@given(
    spec=requests_st,
    data=st.data(),
    blocks=st.integers(11, 24),
    seqs=st.integers(1, 6),
    chunk=st.sampled_from([8, 16, 32]),
    ratio=st.sampled_from([0.05, 0.7]),
)
def test_sglang_conserves_kv_and_finishes_every_request(variant, spec, data, blocks, seqs, chunk, ratio):
    """Low new-token ratios over-admit into tight pools, so retraction happens often."""
    arrivals = data.draw(st.lists(st.integers(0, 12), min_size=len(spec), max_size=len(spec)))
    opts = dict(
        num_gpu_blocks=blocks,
        block_size=4,
        max_num_seqs=seqs,
        max_model_len=MAX_MODEL_LEN,
        max_num_batched_tokens=chunk,
        init_new_token_ratio=ratio,
    )
    opts.update(VARIANTS[variant])

    def make():
        return make_policy("sglang-overlap", **opts)

    def cap(prompt_len, max_tokens):  # init_req_max_new_tokens: context and empty-pool clips
        paged = -(-prompt_len // 4) * 4
        pool = (blocks - 1) * 4
        max_req_len = min(MAX_MODEL_LEN - 1, pool - 1)
        return min(max_tokens, max_req_len - prompt_len - 1, pool - paged - 4 - 1)

    check_run(make, spec, arrivals, cap)
