"""Diagnosing a wedge: active requests, nothing in flight, and a scheduling round that chose nothing.

Such a round is a fixed point: nothing was allocated, released or stored, so every later round
sees the same pool and the same lookup tree and chooses nothing again. New arrivals join behind
the request that blocks the round and cannot change that (only an abort could). With the
KV-aware capacity policies this happens when a context needs more blocks than are free and
nothing that holds blocks can run: for guaranteed-no-evict and static batch, a context past its
first chunk waits in the second pass behind a new context that misses on blocks (TensorRT-LLM's
first pass takes only generations); otherwise a prompt the whole pool cannot hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .capacity import CapacitySchedulerPolicy, schedulable_with_disagg_exception
from .prefix_aware import PrefixSkipper
from .state import LlmRequest

if TYPE_CHECKING:
    from .policy import TrtllmPolicy


def _is_started(req: LlmRequest) -> bool:
    """Holds blocks: a context past its first chunk or a generation."""
    return (
        req.is_context_init_state and not req.is_first_context_chunk
    ) or req.is_generation_in_progress_state


def wedge_message(policy: TrtllmPolicy, step: int) -> tuple[list[str], str]:
    """The requests involved and a message naming the blocked head, what it needs and who waits."""
    acct = policy.acct
    assert acct is not None
    kv = policy.kv
    active = [r for r in policy.active if schedulable_with_disagg_exception(r)]
    static = policy.capacity_policy is CapacitySchedulerPolicy.STATIC_BATCH
    skipper = PrefixSkipper(acct, policy.capacity.prefix_aware, skipping=not static)
    skipper.prefill_with_chunked_contexts(active)
    order = active
    if policy.capacity_policy is not CapacitySchedulerPolicy.MAX_UTILIZATION:
        # no-evict's second pass tries the DISAGG_GENERATION_INIT requests before the contexts
        order = [r for r in active if r.is_disagg_generation_init_state] + [
            r for r in active if not r.is_disagg_generation_init_state
        ]
    head = next((r for r in order if not skipper.beneficial_to_skip(r)), order[0])
    started = [r for r in active if _is_started(r) and r is not head]
    if policy.capacity_policy is CapacitySchedulerPolicy.MAX_UTILIZATION:
        need = acct.needed_blocks_one_step(head, policy.capacity.two_steps, skipper.summary(head))
        what = "blocks for its prompt"  # a DISAGG_GENERATION_INIT request's too
    else:
        need = acct.remaining_blocks_to_completion(head, skipper.summary(head))
        what = "blocks to completion"
    free = kv.num_free_blocks
    held = sum(kv.num_blocks_of(r.request_id) for r in started)
    ids = [head.request_id] + [r.request_id for r in started]
    name = policy.capacity_policy.value
    if started:
        waiting = ", ".join(
            f"{r.request_id} (at {r.context_current_position}/{r.prompt_len})" for r in started
        )
        return ids, (
            f"TensorRT-LLM's {name} scheduler is wedged: request {head.request_id} needs {need} "
            f"{what} and {free} of the pool's {kv.num_blocks} are free, so the second pass breaks "
            f"at it (head-of-line), while the started context(s) {waiting}, holding {held} blocks, "
            "wait behind it and can never run (the first pass takes only generations); no request "
            "can be scheduled again. started_contexts_in_first_pass=True schedules started "
            "contexts with the generations instead."
        )
    return ids, (
        f"TensorRT-LLM's {name} scheduler can never schedule request {head.request_id}: it needs "
        f"{need} {what}, more than the pool's {kv.num_blocks} blocks can give it ({free} free); "
        "no request can be scheduled again"
    )
