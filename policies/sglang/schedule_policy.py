"""SGLang's SchedulePolicy.calc_priority: the waiting queue's order before each prefill pass.

- `lpm` (longest prefix match; `fcfs` when the radix cache is off, and for a pass with more than
  128 waiting requests): every waiting request is looked up in the tree (prompt and outputs,
  uncapped; the lookup refreshes recency and may split nodes) and ranked by its cached prefix
  (capped at len - 1). In-batch de-duplication: a request whose cached prefix is <= 32 tokens is
  also matched against a scratch tree of the waiting requests seen so far in this pass (token by
  token); sharing >= 32 tokens with one of them deprioritises it (it may hit the cache once the
  other ran), otherwise its tokens join the scratch tree. Stable sort, deprioritised last.
- `fcfs`: queue order (with `scheduling_policy=priority`: by priority, stable). Every 32nd pass
  that reaches this point with waiting requests and the cache on refreshes the recency of the
  cached prefixes of the first 128 waiting requests, the queue's head last (most recent), so LRU
  eviction spares the prefixes about to be admitted.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Final

from ..request import Request
from .mem_cache import MemCache, radix_key
from .radix_cache import RadixCache, Unit

IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD: Final = 32
IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD: Final = 32
WAITING_QUEUE_PREFIX_MATCH_MAX: Final = 128
WAITING_PREFIX_REFRESH_INTERVAL: Final = 32


class SchedulePolicy:
    """The queue order of one policy instance, and its refresh-pass counter."""

    def __init__(self, schedule_policy: str, mem: MemCache, priority_scheduling: bool) -> None:
        self.mem = mem
        self.policy = "fcfs" if mem.tree_cache.disable else schedule_policy
        self.priority_scheduling = priority_scheduling
        self.waiting_prefix_refresh_calls = 0

    def calc_priority(self, waiting: deque[Request]) -> list[Request] | None:
        """The waiting queue in this pass's order: a new list, or None where the pass takes the
        queue as it stands (`fcfs` by arrival: under load, a copy of a long queue every pass)."""
        active = self.policy
        if active == "lpm" and len(waiting) > WAITING_QUEUE_PREFIX_MATCH_MAX:
            active = "fcfs"  # too long to match every request each pass
        order: list[Request] | None = None
        if self.policy == "fcfs" and self.priority_scheduling:
            order = sorted(waiting, key=lambda r: r.priority)
        elif active == "lpm":
            order = self._sort_by_longest_prefix(list(waiting))
        if active == "fcfs":
            self._touch_waiting_prefixes(waiting if order is None else order)
        return order

    def reads_head_only(self, n: int) -> bool:
        """A pass over a queue of n keeps its order and reads no request past the first 128, so
        requests joining at the back cannot change it (they only wait)."""
        if self.policy == "fcfs":
            head_only = n >= WAITING_QUEUE_PREFIX_MATCH_MAX or self.mem.tree_cache.disable
            return head_only and not self.priority_scheduling
        return n > WAITING_QUEUE_PREFIX_MATCH_MAX  # lpm matches every request of a shorter queue

    def _sort_by_longest_prefix(self, waiting: list[Request]) -> list[Request]:
        """Match every request, mark in-batch duplicates, sort by cached prefix (stable)."""
        mem = self.mem
        scratch = RadixCache(1, None)
        keys: dict[int, float] = {}
        for r in waiting:
            prefix_len = mem.match_kv_cache(r)
            key = float(-min(prefix_len, max(r.num_tokens - 1, 0)))
            if prefix_len <= IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD:
                units, unit_tokens = self._scratch_key(r)
                shared = scratch.match_prefix(units)[0] * unit_tokens
                if shared >= IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD:
                    key = float("inf")
                else:
                    scratch.insert(units, [0] * len(units))
            keys[id(r)] = key
        return sorted(waiting, key=lambda r: keys[id(r)])

    def _scratch_key(self, r: Request) -> tuple[list[Unit], int]:
        """The request's tokens for the scratch tree, and how many tokens a unit stands for
        (token ids where known; else one content hash per page)."""
        if r.prompt_token_ids is not None:
            return r.prompt_token_ids + r.output_token_ids, 1
        page = self.mem.page_size
        return radix_key(r, r.num_tokens, page), page

    def _touch_waiting_prefixes(self, waiting: deque[Request] | list[Request]) -> None:
        """Every 32nd pass: refresh the cached prefixes of the queue's head, head last."""
        if not waiting or self.mem.tree_cache.disable:
            return
        refresh = self.waiting_prefix_refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0
        self.waiting_prefix_refresh_calls += 1
        if refresh:  # (the head copied only then: the other passes read none of it)
            for r in reversed(list(islice(waiting, WAITING_QUEUE_PREFIX_MATCH_MAX))):
                self.mem.touch_prefix(r)
