"""Exact fast-forward hooks of the synchronous baselines (`orca`, `sarathi`, `static`).

Their decode path is the shared BasePolicy's: every running request gets one token through
`KVCacheManager.allocate_slots` (reserved-to-completion requests find their blocks already there),
`_append_tokens` publishes the blocks its update completes (the ones the schedule published), and
the stop check ends a request at EOS, a stop id or the policy's own output cap (`max_new_tokens`):
a stretch may end with an update that stops requests at their EOS or cap, which `finish` applies
as `update_from_output` does. The steady state: one batch in flight, no admission, nothing
preempted, every running request a plain decode. Requests may wait where no schedule of the stretch
admits one (`OrcaFastForward`, `SarathiFastForward`: every seat taken, or the queue's head short of
blocks as the policy asks for them); `static` jumps only while nothing waits for its next batch. The
replay itself is shared (`schedsim.policies.fastforward`). Each policy declares the capability
itself (`fast_forward()`): a policy derived from BasePolicy may schedule a steady batch differently,
so it is never implied.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from ..fastforward import FastForwardBase, HeadDemand
from ..plan import RequestOutput
from ..request import Request, RequestStatus
from .base import BasePolicy


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (schedsim.accel); SGLang's companion extends it
class BaselineFastForward(FastForwardBase):
    """The baselines' steady state, KV call, counters and last-update stops (one batch in flight only)."""

    finishes_in_last_update = True  # its last update may stop requests (`finish`)

    def __init__(self, policy: BasePolicy) -> None:
        super().__init__(policy)
        # typed (`policy` is Any in the shared base): compiled, a per-request call is then native
        self.base_policy = policy

    def steady_running(self, depth: int) -> list[Request] | None:
        """Running requests if the next iterations are plain one-token decodes of each."""
        p = self.policy
        self.waiters_stay = False
        if depth != 1 or p.max_concurrent_batches != 1 or not p.running:
            return None
        if (
            p.preempted_req_ids
            or len(p.running) + len(p.waiting) != len(p.requests)
            or len(p.running) > self.config.max_num_batched_tokens
        ):
            return None
        if p.waiting and not self._admits_none():
            return None  # (asked before the scan of the batch: after a finish it is the usual no)
        running_status = RequestStatus.RUNNING
        running: list[Request] = p.running
        for r in running:
            if (
                r.status != running_status
                or r.num_output_placeholders
                or r.num_in_flight_tokens
                or r.num_stale_output_tokens
                or r.is_prefill_chunk
                or r.stop_token_ids
                or r.num_spec_tokens
                or r.structured_output
                or r.num_computed_tokens != r.prompt_len + len(r.output_token_ids) - 1
            ):
                return None
        return running

    def _admits_none(self) -> bool:
        """Whether no schedule of the stretch admits a waiting request (sets `waiters_stay`):
        never said here, so a policy jumps only while nothing waits unless it says how it admits."""
        return False

    def _max_new(self, r: Request) -> int:
        """The stop check's output cap (clipped to the pool for reserve-to-completion policies)."""
        return self.base_policy.max_new_tokens(r)

    def _sched_kv(self, r: Request, total: int, known: int, out0: int, i: int, toks: list[int]) -> bool:
        """BasePolicy.allocate(r, 1): allocate_slots for one token (no-op between candidates)."""
        kv = self.kv
        before = (len(kv.req_to_blocks[r.request_id]), kv.num_cached_block.get(r.request_id, 0))
        self._set_outputs(r, out0, i, toks)
        r.num_computed_tokens = total - 1
        if kv.allocate_slots(r, 1, 0, None, num_lookahead_tokens=0, has_scheduled_reqs=True) is None:
            raise AssertionError(f"fast-forward: {r.request_id} found no free block inside its horizon")
        return before != (len(kv.req_to_blocks[r.request_id]), kv.num_cached_block.get(r.request_id, 0))

    def _after_advance(self, reqs: list[Request], k: int) -> None:
        """The plan counter."""
        self.policy.step_id += k

    def finish(self, reqs: list[Request]) -> list[RequestOutput]:
        """The stretch's last update (its tokens appended by advance): the requests whose last
        token stops them (`check_stop`: EOS, or the output cap the horizon let the last update
        reach) stop in batch order, as `update_from_output` stops them (`stop_request`: the
        family's own release, SGLang's tree insert included). The baselines' update publishes no
        block their schedules have not (`_replay_kv`), so a stop frees exactly what it would."""
        p = self.base_policy
        outputs: list[RequestOutput] = []
        for r in list(reqs):  # (the running list itself, which each stop shrinks)
            tok = r.output_token_ids[-1]
            status = p.check_stop(r, tok)
            if status is not None:
                p.stop_request(r, status)
                outputs.append(RequestOutput(r.request_id, [tok], status))
        return outputs


class OrcaFastForward(BaselineFastForward):
    """orca: a waiting request is admitted whole, with its outputs' slots when reserving."""

    def _admits_none(self) -> bool:
        """The head's whole prompt over the budget the decodes leave, or its blocks missing."""
        p = self.policy
        budget = self.config.max_num_batched_tokens - len(p.running)
        head: Request = p.waiting[0]
        lookahead = max(p.max_new_tokens(head) - head.num_output_tokens - 1, 0) if p.reserve else 0
        demand = HeadDemand(budget, budget, chunked=False, lookahead=lookahead)
        return self._blocked_queue(head, p.running, self.config.max_num_seqs, demand)


class SarathiFastForward(BaselineFastForward):
    """sarathi: a waiting request is admitted with a chunk of the budget the decodes leave."""

    def _admits_none(self) -> bool:
        """No budget left after the decodes, or the head's first chunk missing its blocks."""
        p = self.policy
        budget = self.config.max_num_batched_tokens - len(p.running)
        if budget <= 0:
            self.waiters_stay = True
            return True
        demand = HeadDemand(budget, budget, chunked=True)
        return self._blocked_queue(p.waiting[0], p.running, self.config.max_num_seqs, demand)
