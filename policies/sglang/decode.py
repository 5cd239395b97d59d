"""SGLang's decode-batch retraction (`ScheduleBatch.retract_decode`, 0.5.23).

Order: most-preferred to keep first, by (outputs, -prompt length) descending, stable; victims are
popped from the end (fewest outputs first, longest prompt first among equals, the later batch
position first among full ties). At least one request goes, then more while the rest do not fit
(each check evicts tree leaves first), always keeping one; if even the last one does not fit it
is aborted. The survivors stay in retraction order: the batch is filtered by the sorted indices.
"""

from __future__ import annotations

from collections.abc import Callable

from ..request import Request


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
    reqs: list[Request], fits: Callable[[list[Request]], bool], release: Callable[[Request, int], None]
) -> tuple[list[Request], list[Request], Request | None]:
    """Retract until the rest fit; returns (kept, in retraction order; retracted, in pop order;
    the aborted last request or None). `release(victim, remaining)` frees a victim."""
    order = retraction_order(reqs)
    retracted: list[Request] = []
    first = True
    while first or not fits(order):
        if len(order) == 1:
            break
        first = False
        victim = order.pop()
        release(victim, len(order))
        retracted.append(victim)
    aborted = None
    if len(order) <= 1 and not fits(order):
        aborted = order.pop()
    return order, retracted, aborted
