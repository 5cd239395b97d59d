"""SGLang's decode-batch update: skip requests finishing in flight, check KV, retract on OOM.

`update_running_batch` (scheduler.py) and `ScheduleBatch.retract_decode` (schedule_batch.py):
a decode needs a new page for every request whose committed length is page-aligned; if the pool
cannot give them, requests are retracted (fewest outputs first, longest prompt first among
equals), at least one and until the rest fit, always keeping one; the survivors re-estimate the
new-token ratio. Without retraction the ratio decays one step.
"""

from __future__ import annotations

from collections.abc import Callable

from ..request import Request


def pages_needed(reqs: list[Request], block_size: int) -> int:
    """New KV blocks the next decode of these requests takes (one per full last block)."""
    return sum(1 for r in reqs if r.num_computed_tokens % block_size == 0)


def finishing_inflight(running: list[Request], max_new: dict[str, int]) -> list[Request]:
    """Requests whose in-flight output commits their last token by length (`_reqs_finishing_inflight`)."""
    return [
        r
        for r in running
        if r.num_output_placeholders > 0 and r.num_output_tokens + 1 >= max_new[r.request_id]
    ]


def retraction_order(reqs: list[Request]) -> list[Request]:
    """Most-preferred to keep first; retraction pops from the end (stable for ties)."""
    return sorted(reqs, key=lambda r: (r.num_output_tokens, -r.prompt_len), reverse=True)


def retract_decode(
    reqs: list[Request], free_blocks: Callable[[], int], block_size: int, release: Callable[[Request], None]
) -> tuple[list[Request], list[Request], Request | None]:
    """Retract until the rest fit; returns (kept in running order, retracted, aborted-last or None)."""
    order = retraction_order(reqs)
    retracted: list[Request] = []
    first = True
    while first or pages_needed(order, block_size) > free_blocks():
        if len(order) == 1:
            break
        first = False
        victim = order.pop()
        release(victim)
        retracted.append(victim)
    aborted = None
    if len(order) <= 1 and pages_needed(order, block_size) > free_blocks():
        aborted = order.pop()
    kept_ids = {id(r) for r in order}
    return [r for r in reqs if id(r) in kept_ids], retracted, aborted
