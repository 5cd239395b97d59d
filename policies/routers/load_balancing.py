"""Load-balancing routers: round-robin, seeded random, least outstanding requests, least KV usage
and power-of-two choices (what vLLM's production-stack router, SGLang's router and llm-d offer
before any cache awareness)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from .interface import Decision, ReplicaView, RouteRequest, least_loaded
from .registry import RouterConfig, register_router


@register_router("round-robin", "each request to the next replica in turn")
class RoundRobinRouter:
    """Cycles through the replicas in index order, blind to load."""

    def __init__(self, config: RouterConfig | None = None) -> None:
        self.next = 0

    def route(self, request: RouteRequest, views: Sequence[ReplicaView]) -> Decision:
        """The next replica in turn."""
        i = self.next % len(views)
        self.next = i + 1
        return Decision(i, "round-robin")


@register_router("random", "each request to a replica drawn uniformly (seeded)")
class RandomRouter:
    """Uniform seeded draws, blind to load."""

    def __init__(self, config: RouterConfig | None = None) -> None:
        self.rng = random.Random((config or RouterConfig()).seed)

    def route(self, request: RouteRequest, views: Sequence[ReplicaView]) -> Decision:
        """A replica drawn uniformly."""
        return Decision(self.rng.randrange(len(views)), "random")


@register_router("least-outstanding", "the replica with the fewest routed, unfinished requests")
class LeastOutstandingRouter:
    """Join the shortest queue, by the router's own live count of in-flight requests."""

    def __init__(self, config: RouterConfig | None = None) -> None:
        pass

    def route(self, request: RouteRequest, views: Sequence[ReplicaView]) -> Decision:
        """The replica with the fewest outstanding requests (ties: lowest index)."""
        return Decision(least_loaded(views), "least-outstanding")


@register_router("least-kv", "the replica with the lowest scraped KV-cache usage")
class LeastKvRouter:
    """The replica whose KV pool is emptiest (ties: fewer outstanding requests, lowest index)."""

    def __init__(self, config: RouterConfig | None = None) -> None:
        pass

    def route(self, request: RouteRequest, views: Sequence[ReplicaView]) -> Decision:
        """The replica with the lowest KV usage."""
        best = min(range(len(views)), key=lambda i: (views[i].kv_usage, views[i].num_outstanding, i))
        return Decision(best, "least-kv")


@register_router("power-of-two", "the less loaded of two replicas drawn at random (seeded)")
class PowerOfTwoRouter:
    """Power of two choices: draw two distinct replicas, keep the one with fewer outstanding."""

    def __init__(self, config: RouterConfig | None = None) -> None:
        self.rng = random.Random((config or RouterConfig()).seed)

    def route(self, request: RouteRequest, views: Sequence[ReplicaView]) -> Decision:
        """The less loaded of two distinct draws (one replica: that one)."""
        n = len(views)
        if n == 1:
            return Decision(0, "power-of-two")
        a, b = self.rng.sample(range(n), 2)
        return Decision(least_loaded(views, sorted((a, b))), "power-of-two")
