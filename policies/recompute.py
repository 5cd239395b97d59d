"""The recompute frontier (vLLM's accounting of what a preemption costs): how far a request had
computed when it lost its KV, so that what it schedules again below that counts as recomputed,
prefix hits excluded. The vLLM schedulers and `BasePolicy` keep one dict of frontiers each."""

from __future__ import annotations

from .request import Request


def mark_frontier(frontiers: dict[str, int], request_id: str, computed: int) -> None:
    """The request lost its KV with `computed` tokens done (the furthest of its losses counts)."""
    frontiers[request_id] = max(computed, frontiers.get(request_id, 0))


def count_recompute(frontiers: dict[str, int], request: Request, num_new: int, context: int) -> None:
    """Tokens [context, context + num_new) below the request's frontier are computed a second
    time; once the request reaches its frontier the frontier is forgotten."""
    rid = request.request_id
    frontier = frontiers.get(rid)
    if frontier is not None:
        request.num_recomputed_tokens += max(0, min(context + num_new, frontier) - context)
        if context + num_new >= frontier:
            del frontiers[rid]
