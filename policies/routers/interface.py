"""The router interface: what a router reads of a request and of each replica, and what it decides.

A router is written once against `Router.route(request, views) -> Decision`, like a scheduler
policy against the step interface: pure Python, deterministic given its seed, and blind to
everything a real router in front of a fleet of engines cannot see. A `ReplicaView` holds the
numbers a replica's metrics endpoint publishes (running and waiting requests, KV usage), read at
`observed_at` (the last scrape, or now), plus the router's own live count of the requests it sent
there and has not seen finish (a router proxies the responses, so that count is never stale).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What the router reads of an incoming request: what the HTTP request carries."""

    request_id: str
    arrival_time: float
    prompt_len: int
    # one hash per full prompt block (equal hashes: equal content, chained by position); None or
    # empty: the prompt shares nothing the router can recognise
    prompt_block_hashes: tuple[int, ...] | None = None
    # conversation / session the request belongs to (a header such as x-session-id), if any
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica as the router observes it."""

    index: int
    num_running: int  # scraped: requests the replica's scheduler runs
    num_waiting: int  # scraped: requests queued in the replica's scheduler
    kv_usage: float  # scraped: fraction of the replica's KV blocks in use
    observed_at: float  # when the scraped numbers were read
    num_outstanding: int  # live: routed there and not yet finished (the router's own count)
    # precise prefix lookups (KV-cache events): how many leading prompt blocks of a request the
    # replica's KV cache holds; None where the replica publishes no KV events
    cached_prefix_blocks: Callable[[RouteRequest], int] | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a request goes and why (the reason names the rule that decided, for the tables)."""

    replica: int
    reason: str


@runtime_checkable
class Router(Protocol):
    """Chooses a replica for each arriving request."""

    def route(self, request: RouteRequest, views: Sequence[ReplicaView]) -> Decision:
        """The replica `request` goes to; `views` has one entry per replica, in index order."""
        ...


def least_loaded(views: Sequence[ReplicaView], candidates: Sequence[int] | None = None) -> int:
    """The replica with the fewest outstanding requests (ties: the lowest index)."""
    pool = range(len(views)) if candidates is None else candidates
    return min(pool, key=lambda i: (views[i].num_outstanding, i))
