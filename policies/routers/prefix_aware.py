"""Cache-aware routers: send a request where its prompt prefix is cached, unless that unbalances
the fleet.

Both follow the rule of SGLang's cache-aware router. If the load is imbalanced (the most loaded
replica has more than `balance_abs_threshold` outstanding requests above the least loaded one,
and more than `balance_rel_threshold` times its load), the request goes to the least loaded
replica ("balance"). Otherwise the replica holding the longest prefix of the prompt wins when the
match covers more than `cache_threshold` of the prompt's blocks ("prefix-hit"); below that the
request goes where it adds the least ("prefix-miss": the replica with the smallest share of the
tree, or the least loaded one for the precise router).

`prefix-aware` estimates what each replica caches from what it routed there (an approximate tree,
no help from the engines). `prefix-precise` asks each replica's KV-cache index (what KV-cache
events report, as llm-d's precise prefix scorer does), so evictions on the engine are seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .interface import Decision, ReplicaView, RouteRequest, least_loaded
from .prefix_tree import ApproximatePrefixTree
from .registry import RouterConfig, register_router


@dataclass(frozen=True)
class PrefixAwareConfig(RouterConfig):
    """Cache-aware routing knobs."""

    cache_threshold: float = 0.5  # share of the prompt's blocks a match must cover to follow it
    balance_abs_threshold: int = 32  # outstanding-request gap above which load wins ...
    balance_rel_threshold: float = 1.5  # ... when the most loaded also has this many times the least
    max_tree_blocks: int | None = None  # per replica in the approximate tree (None: unbounded)

    def __post_init__(self) -> None:
        """Reject impossible values, naming the field."""
        super().__post_init__()
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ValueError(
                f"PrefixAwareConfig.cache_threshold must be in [0, 1], got {self.cache_threshold}"
            )
        if self.balance_abs_threshold < 0:
            raise ValueError(
                f"PrefixAwareConfig.balance_abs_threshold must be >= 0, got {self.balance_abs_threshold}"
            )
        if self.balance_rel_threshold < 1.0:
            raise ValueError(
                f"PrefixAwareConfig.balance_rel_threshold must be >= 1, got {self.balance_rel_threshold}"
            )
        if self.max_tree_blocks is not None and self.max_tree_blocks < 1:
            raise ValueError(
                f"PrefixAwareConfig.max_tree_blocks must be None or >= 1, got {self.max_tree_blocks}"
            )


def imbalanced(views: Sequence[ReplicaView], config: PrefixAwareConfig) -> bool:
    """The fleet's outstanding requests are spread too unevenly to follow the cache."""
    loads = [v.num_outstanding for v in views]
    hi, lo = max(loads), min(loads)
    return hi - lo > config.balance_abs_threshold and hi > config.balance_rel_threshold * lo


def best_match(matched: dict[int, int], views: Sequence[ReplicaView]) -> int | None:
    """The replica with the longest match (ties: fewer outstanding, lowest index); None: no match."""
    if not matched or max(matched.values()) == 0:
        return None
    return min(matched, key=lambda i: (-matched[i], views[i].num_outstanding, i))


@register_router(
    "prefix-aware",
    "longest routed prefix (approximate per-replica tree, as SGLang's router) unless imbalanced",
    PrefixAwareConfig,
)
class PrefixAwareRouter:
    """Cache-aware routing from the router's own tree of routed prefixes."""

    def __init__(self, config: PrefixAwareConfig | None = None) -> None:
        self.config = config or PrefixAwareConfig()
        self.tree = ApproximatePrefixTree(self.config.max_tree_blocks)

    def route(self, request: RouteRequest, views: Sequence[ReplicaView]) -> Decision:
        """Balance, prefix hit or prefix miss; the chosen replica's tree learns the prompt."""
        hashes = request.prompt_block_hashes or ()
        decision = self.decide(hashes, views)
        if hashes:
            self.tree.insert(hashes, decision.replica, request.arrival_time)
        return decision

    def decide(self, hashes: Sequence[int], views: Sequence[ReplicaView]) -> Decision:
        """The rule, before the tree learns the prompt."""
        if imbalanced(views, self.config):
            return Decision(least_loaded(views), "balance")
        best = best_match(self.tree.match(hashes), views) if hashes else None
        if best is not None:
            n = self.tree.match(hashes)[best]
            if n > self.config.cache_threshold * len(hashes):
                return Decision(best, "prefix-hit")
        size = self.tree.size
        return Decision(
            min(range(len(views)), key=lambda i: (size.get(i, 0), views[i].num_outstanding, i)), "prefix-miss"
        )


@register_router(
    "prefix-precise",
    "longest prefix in each replica's KV cache (KV-cache events, as llm-d's scorer) unless imbalanced",
    PrefixAwareConfig,
)
class PrefixPreciseRouter:
    """Cache-aware routing from the replicas' own KV-cache indexes."""

    def __init__(self, config: PrefixAwareConfig | None = None) -> None:
        self.config = config or PrefixAwareConfig()

    def route(self, request: RouteRequest, views: Sequence[ReplicaView]) -> Decision:
        """Balance, prefix hit or prefix miss (least loaded)."""
        if imbalanced(views, self.config):
            return Decision(least_loaded(views), "balance")
        hashes = request.prompt_block_hashes or ()
        if hashes:
            matched = {}
            for v in views:
                if v.cached_prefix_blocks is None:
                    raise ValueError(
                        f"router 'prefix-precise' needs KV-cache events; replica {v.index} publishes none "
                        "(its policy has no block-hash index): use 'prefix-aware'"
                    )
                matched[v.index] = v.cached_prefix_blocks(request)
            best = best_match(matched, views)
            if best is not None and matched[best] > self.config.cache_threshold * len(hashes):
                return Decision(best, "prefix-hit")
        return Decision(least_loaded(views), "prefix-miss")
