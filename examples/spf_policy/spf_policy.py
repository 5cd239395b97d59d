"""Shortest prompt first, with a starvation cap: a schedsim policy written outside the package.

Each step every running request decodes one token (preempting the newest when the KV cache is
full), then waiting requests are admitted shortest prompt first, whole, while the token budget,
the seats and the KV cache allow; a request that has waited `max_wait_steps` steps goes ahead of
every shorter one, so long prompts are delayed, never starved.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from schedsim.policies import Request, SchedulerConfig, StepPlan, register_policy
from schedsim.policies.baselines import BasePolicy


@dataclass
class SpfConfig(SchedulerConfig):
    """SchedulerConfig's shared knobs (KV pool, token budget, seats) plus the starvation cap."""

    max_wait_steps: int = 64  # steps after which a waiting request is served first
    enable_chunked_prefill: bool = False  # whole prompts only (so the run's budget holds any prompt)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_wait_steps < 1:
            raise ValueError(f"SpfConfig.max_wait_steps must be >= 1, got {self.max_wait_steps}")


@register_policy("spf", "shortest prompt first; a request waiting max_wait_steps goes first", SpfConfig)
class ShortestPromptFirst(BasePolicy):
    """Decode everything running, then admit waiting requests by (starved first, prompt length)."""

    def __init__(self, config: SpfConfig) -> None:
        super().__init__(config)
        self.max_wait_steps = config.max_wait_steps
        self.waiting_since: dict[str, int] = {}  # request id -> step it (re)joined the queue

    def schedule_into(self, plan: StepPlan) -> None:
        budget = self.config.max_num_batched_tokens - self.decode_running(plan)
        if self.preempted_req_ids:
            return  # as vLLM: no admission in a step that preempted
        seats = self.config.max_num_seqs - len(self.running)
        for req in self.admission_order():
            if seats <= 0 or budget <= 0:
                break  # every request needs a seat and at least one token
            num_new = self.admit_whole(plan, req, budget)
            if num_new:  # else too long for what is left: a shorter one may still fit
                self.waiting_since.pop(req.request_id, None)
                budget -= num_new
                seats -= 1

    def admission_order(self) -> list[Request]:
        """The waiting queue, starved requests first, then by prompt length; ties keep queue
        order (stable sorts). A request's wait counts from the first pass that sees it queued."""
        now, since = self.step_id, self.waiting_since
        for req in self.waiting:
            since.setdefault(req.request_id, now)
        cutoff = now - self.max_wait_steps  # joined at or before it: starved
        by_length = sorted(self.waiting, key=attrgetter("num_tokens"))
        starved = [r for r in by_length if since[r.request_id] <= cutoff]
        return starved + [r for r in by_length if since[r.request_id] > cutoff]
