"""Each shipped router against hand-built views: the replica it picks and the reason it gives."""

from __future__ import annotations

import random

import pytest
from schedsim.policies.routers import (
    ApproximatePrefixTree,
    PrefixAwareConfig,
    ReplicaView,
    RouterConfig,
    RouteRequest,
    list_routers,
    make_router,
)
from schedsim.policies.routers.prefix_aware import PrefixAwareRouter

pytestmark = pytest.mark.pure_python


def views(outstanding: list[int], kv: list[float] | None = None, lookup=None) -> list[ReplicaView]:
    kv = kv or [0.0] * len(outstanding)
    return [ReplicaView(i, 0, 0, kv[i], 0.0, n, lookup) for i, n in enumerate(outstanding)]


def req(rid: str = "r", hashes: tuple[int, ...] | None = None, session: str | None = None, t: float = 0.0):
    return RouteRequest(rid, t, 16 * len(hashes or ()) + 1, hashes, session)


def test_the_shipped_names() -> None:
    assert [r.name for r in list_routers()] == [
        "least-kv",
        "least-outstanding",
        "power-of-two",
        "prefix-aware",
        "prefix-precise",
        "random",
        "round-robin",
        "session-affinity",
    ]


def test_round_robin_cycles_blind_to_load() -> None:
    r = make_router("round-robin")
    assert [r.route(req(), views([9, 0, 0])).replica for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_random_is_seeded() -> None:
    picks = [make_router("random", seed=5).route(req(), views([0] * 4)).replica for _ in range(1)]
    a = make_router("random", seed=5)
    b = make_router("random", seed=5)
    va = [a.route(req(), views([0] * 4)).replica for _ in range(20)]
    assert va == [b.route(req(), views([0] * 4)).replica for _ in range(20)]
    assert va == [random.Random(5).randrange(4) for _ in range(1)] + va[1:]  # the stdlib's draws
    assert picks[0] == va[0] and set(va) <= {0, 1, 2, 3} and len(set(va)) > 1


def test_least_outstanding_breaks_ties_by_index() -> None:
    r = make_router("least-outstanding")
    assert r.route(req(), views([3, 1, 1, 2])).replica == 1
    assert r.route(req(), views([0, 0])).reason == "least-outstanding"


def test_least_kv_reads_the_scraped_usage() -> None:
    r = make_router("least-kv")
    assert r.route(req(), views([0, 5, 9], kv=[0.5, 0.2, 0.2])).replica == 1  # tie on kv: fewer outstanding


def test_power_of_two_keeps_the_less_loaded_draw() -> None:
    r = make_router("power-of-two", seed=3)
    rng = random.Random(3)
    loads = [5, 1, 7, 3, 0]
    for _ in range(30):
        a, b = rng.sample(range(5), 2)
        want = min(sorted((a, b)), key=lambda i: (loads[i], i))
        assert r.route(req(), views(loads)).replica == want
    assert make_router("power-of-two").route(req(), views([4])).replica == 0


def test_session_affinity_sticks_to_the_first_replica() -> None:
    r = make_router("session-affinity")
    assert r.route(req(session="s1"), views([2, 0, 1])).replica == 1
    d = r.route(req(session="s1"), views([0, 9, 0]))
    assert (d.replica, d.reason) == (1, "session")
    assert r.route(req(session="s2"), views([0, 9, 0])).reason == "new-session"
    assert r.route(req(), views([3, 0, 1])).reason == "no-session"


def test_prefix_tree_matches_and_evicts_least_recent_leaves() -> None:
    tree = ApproximatePrefixTree(max_blocks=4)
    tree.insert((1, 2, 3), 0, now=1.0)
    tree.insert((1, 2, 9), 1, now=2.0)
    assert tree.match((1, 2, 3, 4)) == {0: 3, 1: 2}
    assert tree.match((7,)) == {}
    tree.insert((1, 5), 0, now=3.0)  # replica 0 holds 1,2,3,5: at the bound
    tree.insert((1, 6), 0, now=4.0)  # 5 blocks: the oldest leaf (3, t=1) goes
    assert tree.size[0] == 4
    assert tree.match((1, 2, 3)) == {0: 2, 1: 2}
    assert tree.match((1, 5)) == {0: 2, 1: 1}


def test_prefix_aware_follows_the_cache_then_the_smallest_tree() -> None:
    r = PrefixAwareRouter(PrefixAwareConfig(cache_threshold=0.5, balance_abs_threshold=4))
    a = r.route(req("a", (1, 2, 3, 4)), views([0, 0, 0]))
    assert (a.replica, a.reason) == (0, "prefix-miss")  # empty tree: smallest share, lowest index
    b = r.route(req("b", (8, 9)), views([1, 0, 0]))
    assert (b.replica, b.reason) == (1, "prefix-miss")  # replica 0 has 4 blocks in the tree
    c = r.route(req("c", (1, 2, 3, 7)), views([1, 1, 0]))
    assert (c.replica, c.reason) == (0, "prefix-hit")  # 3 of 4 blocks > half
    d = r.route(req("d", (1, 5, 6, 7)), views([2, 1, 0]))
    assert (d.replica, d.reason) == (2, "prefix-miss")  # 1 of 4 is not more than half
    e = r.route(req("e", (1, 2, 3, 4)), views([9, 1, 3]))
    assert (e.replica, e.reason) == (1, "balance")  # 9 - 1 > 4 and 9 > 1.5 * 1


def test_prefix_precise_asks_the_replicas_kv_index() -> None:
    cached = {0: 1, 1: 3, 2: 0}
    r = make_router("prefix-precise")
    lookup_views = [ReplicaView(i, 0, 0, 0.0, 0.0, 0, lambda q, i=i: cached[i]) for i in range(3)]
    d = r.route(req("x", (1, 2, 3, 4)), lookup_views)
    assert (d.replica, d.reason) == (1, "prefix-hit")
    cached[1] = 2  # not more than half: least loaded
    assert r.route(req("x", (1, 2, 3, 4)), lookup_views).reason == "prefix-miss"
    with pytest.raises(ValueError, match="publishes none"):
        r.route(req("y", (1,)), views([0, 0]))


def test_bad_names_and_options_are_named() -> None:
    with pytest.raises(ValueError, match="unknown router 'nope'"):
        make_router("nope")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['x'\]"):
        make_router("round-robin", x=1)
    with pytest.raises(ValueError, match="cache_threshold"):
        make_router("prefix-aware", cache_threshold=2.0)
    with pytest.raises(ValueError, match="seed"):
        RouterConfig(seed=-1)
