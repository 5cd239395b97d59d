"""TensorRT-LLM's free-block queue: release at the back, claim from anywhere, take the front."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from schedsim.policies.trtllm.eviction_policy import LRUEvictionPolicy
from schedsim.policies.trtllm.radix_tree import KVCacheBlock

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def test_release_appends_claim_removes_from_the_middle_and_the_front_leaves_first():
    blocks = [KVCacheBlock(i) for i in range(5)]
    queue = LRUEvictionPolicy(blocks[1:4])
    assert queue.block_ids() == [1, 2, 3] and queue.num_free == 3
    queue.claim(blocks[2])
    queue.claim(blocks[2])  # not queued any more: nothing happens
    assert queue.block_ids() == [1, 3] and not queue.is_free(blocks[2])
    queue.release(blocks[2])
    queue.release(blocks[1])  # already queued: it keeps its place
    assert queue.block_ids() == [1, 3, 2] and queue.num_free == 3
    assert queue.get_free_block() is blocks[1] and queue.get_free_block() is blocks[3]
    assert queue.get_free_block() is blocks[2] and queue.num_free == 0
    with pytest.raises(ValueError, match="free queue is empty"):
        queue.get_free_block()


@given(st.lists(st.tuples(st.sampled_from(["release", "claim", "take"]), st.integers(0, 7)), max_size=60))
def test_the_queue_orders_blocks_as_an_ordered_dict_would(ops: list[tuple[str, int]]) -> None:
    blocks = [KVCacheBlock(i) for i in range(8)]
    queue = LRUEvictionPolicy(blocks[:4])
    model = dict.fromkeys(range(4))  # insertion-ordered: re-inserting an existing key keeps its place
    for op, i in ops:
        if op == "release":
            queue.release(blocks[i])
            model.setdefault(i)
        elif op == "claim":
            queue.claim(blocks[i])
            model.pop(i, None)
        elif model:
            front = next(iter(model))
            del model[front]
            assert queue.get_free_block() is blocks[front]
        assert queue.block_ids() == list(model) and queue.num_free == len(model)
        assert all(queue.is_free(b) == (b.block_id in model) for b in blocks)
