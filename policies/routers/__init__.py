"""Routers: which replica of a cluster serves each request.

| module | owns |
|--------|------|
| `interface.py` | RouteRequest, ReplicaView (what a real router observes), Decision, the Router protocol |
| `registry.py` | router names -> routers; plugins through the `schedsim.routers` entry points |
| `load_balancing.py` | round-robin, random, least-outstanding, least-kv, power-of-two |
| `affinity.py` | session-affinity |
| `prefix_tree.py`, `prefix_aware.py` | cache-aware routing: prefix-aware (approximate tree), prefix-precise |

Pure Python like the policies: no simulator, no clock, randomness only from the configured seed.
"""

from . import affinity as affinity  # "session-affinity"
from . import load_balancing as load_balancing  # "round-robin", "random", "least-*", "power-of-two"
from . import prefix_aware as prefix_aware  # "prefix-aware", "prefix-precise"
from .interface import Decision, ReplicaView, Router, RouteRequest, least_loaded
from .prefix_aware import PrefixAwareConfig
from .prefix_tree import ApproximatePrefixTree
from .registry import (
    ROUTER_ENTRY_POINT_GROUP,
    RouterConfig,
    RouterInfo,
    get_router_info,
    list_routers,
    make_router,
    register_router,
)

__all__ = [
    "ROUTER_ENTRY_POINT_GROUP",
    "ApproximatePrefixTree",
    "Decision",
    "PrefixAwareConfig",
    "ReplicaView",
    "RouteRequest",
    "Router",
    "RouterConfig",
    "RouterInfo",
    "get_router_info",
    "least_loaded",
    "list_routers",
    "make_router",
    "register_router",
]
