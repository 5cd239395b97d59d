"""The router process: walks the cluster's arrivals and aborts in time order, routes each arrival
once and sends each abort to the replica holding that request; every decision is logged.

At an arrival the router reads every replica's view (live, or the last periodic scrape when
`scrape_interval` > 0) and asks the Router. Replicas sync SimPy's clock before each poll, so when
the router runs at time t every replica's state is its state at t. When the arrivals run out
every inbox is closed: an engine with nothing left to do then ends.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import simpy
from schedsim.cluster.replica import Replica
from schedsim.metrics.column import Column
from schedsim.policies import Request
from schedsim.policies.routers import ReplicaView, Router, RouteRequest
from schedsim.worlds.inputs import ARRIVAL, InputStream


class RoutingLog:
    """One row per routing decision, as columns (the routing table), plus per-replica load rows."""

    def __init__(self, num_replicas: int, pool: Sequence[int] | None = None) -> None:
        self.time = Column("d")
        self.row = Column("q")
        self.replica = Column("q")
        self.reason_code = Column("q")
        self.reasons: dict[str, int] = {}
        self.chosen_outstanding = Column("q")
        self.min_outstanding = Column("q")
        self.max_outstanding = Column("q")
        self.total_outstanding = Column("q")
        self.num_replicas = num_replicas
        # the replicas a decision chooses among (cluster indices), one load row each
        self.pool: list[int] = list(range(num_replicas)) if pool is None else list(pool)
        # per decision and replica: outstanding, running, waiting, kv usage (the load table)
        self.load_outstanding = Column("q")
        self.load_running = Column("q")
        self.load_waiting = Column("q")
        self.load_kv = Column("d")

    def reason(self, name: str) -> int:
        """The code of a decision reason."""
        code = self.reasons.get(name)
        if code is None:
            code = self.reasons[name] = len(self.reasons)
        return code

    def record(self, t: float, row: int, i: int, reason: str, views: Sequence[ReplicaView]) -> None:
        """A decision's row (i: the chosen replica's position in the pool) and the loads behind it."""
        loads = [v.num_outstanding for v in views]
        self.time.append(t)
        self.row.append(row)
        self.replica.append(self.pool[i])
        self.reason_code.append(self.reason(reason))
        self.chosen_outstanding.append(loads[i])
        self.min_outstanding.append(min(loads))
        self.max_outstanding.append(max(loads))
        self.total_outstanding.append(sum(loads))
        for v in views:
            self.load_outstanding.append(v.num_outstanding)
            self.load_running.append(v.num_running)
            self.load_waiting.append(v.num_waiting)
            self.load_kv.append(v.kv_usage)


class RouterProcess:
    """The router in front of the replicas, as a SimPy process."""

    def __init__(
        self,
        env: simpy.Environment,
        stream: InputStream,
        rows: Sequence[int],
        replicas: Sequence[Replica],
        router: Router,
        build: Callable[[int], tuple[Request, RouteRequest, int]],
        scrape_interval: float = 0.0,
        until: float | None = None,
        pool: Sequence[int] | None = None,
    ) -> None:
        self.env, self.stream, self.replicas, self.router = env, stream, replicas, router
        # the replicas arrivals are routed among (a prefill/decode cluster: the prefill pool)
        self.pool: list[int] = list(range(len(replicas))) if pool is None else list(pool)
        self.rows = rows  # arrival k of the stream is workload row rows[k]
        self.build = build  # row -> its Request, what the router reads of it, its target output
        self.scrape_interval = scrape_interval
        self.until = math.inf if until is None else until
        self.owner: dict[str, int] = {}  # request id -> replica it was routed to
        self.log = RoutingLog(len(self.pool), self.pool)
        self.next_scrape = 0.0 if scrape_interval > 0 else math.inf
        self.done = False

    def next_time(self) -> float | None:
        """When the router next acts (an input or a scrape); None once it never will again."""
        if self.done:
            return None
        t = self.stream.next_time()
        if t is not None and t > self.until:
            t = None
        nxt = math.inf if t is None else t
        nxt = nxt if nxt <= self.next_scrape else self.next_scrape
        return None if nxt == math.inf else nxt

    def next_abort_poll_time(self) -> float | None:
        """When a replica's aborts-only poll must stop a fast-forward: the router's next action,
        which may read the replica's state; with a single replica the router chooses nothing, so
        only an abort due next matters (an arrival ahead holds the aborts behind it back)."""
        if len(self.replicas) > 1:
            return self.next_time()
        if self.done:
            return None
        t = self.stream.next_abort_poll_time()
        return None if t is None or t > self.until else t

    def run(self) -> Any:
        """The process: scrape and route in time order until the inputs run out, then close."""
        env = self.env
        while True:
            t = self.stream.next_time()
            if t is None or t > self.until:
                break
            while self.next_scrape <= t:
                if self.next_scrape > env.now:
                    yield env.timeout(self.next_scrape - env.now)
                self.scrape_all(env.now)
                self.next_scrape += self.scrape_interval
            if t > env.now:
                yield env.timeout(t - env.now)
            self.dispatch(t)
        self.done = True  # past `until` nothing more is routed or read; the engines stop on their own
        if t is None:
            for i in self.pool:
                self.replicas[i].inbox.close()

    def scrape_all(self, now: float) -> None:
        """Every replica's metrics endpoint read now."""
        for rep in self.replicas:
            rep.last_scrape = rep.scrape(now)

    def dispatch(self, t: float) -> None:
        """Route the arrivals due at t and forward the aborts to their replicas, in stream order."""
        s = self.stream
        times, pos = s.times, s.pos
        while pos < len(times) and times[pos] <= t:
            ref = s.refs[pos]
            if s.kinds[pos] == ARRIVAL:
                self.route(int(self.rows[ref]), t)
            else:
                rid = s.abort_ids[ref]
                i = self.owner.get(rid)
                if i is not None:  # an abort of a request not yet arrived is a no-op, as on one engine
                    self.forward_abort(i, rid, t)
            pos += 1
        s.pos = pos

    def forward_abort(self, i: int, rid: str, t: float) -> None:
        """A client abort, sent to the replica holding the request."""
        self.replicas[i].inbox.put_abort(t, rid)

    def route(self, row: int, t: float) -> None:
        """One routing decision, logged with the loads the router saw."""
        request, info, target = self.build(row)
        i = route_in_pool(
            self.router, self.log, self.replicas, self.pool, row, t, request, info, self.scrape_interval <= 0
        )
        self.owner[request.request_id] = i
        rep = self.replicas[i]
        rep.admit(row, request, target)
        rep.inbox.put_request(t, request)


def route_in_pool(
    router: Router,
    log: RoutingLog,
    replicas: Sequence[Replica],
    pool: Sequence[int],
    row: int,
    t: float,
    request: Request,
    info: RouteRequest,
    live: bool,
) -> int:
    """Ask the router among the pool's replicas, log the decision; returns the cluster index."""
    views = [replicas[j].view(t, live) for j in pool]
    decision = router.route(info, views)
    i = decision.replica
    if not 0 <= i < len(pool):
        raise ValueError(
            f"router {type(router).__name__} sent request {request.request_id} to replica {i}; "
            f"the pool has replicas 0..{len(pool) - 1}"
        )
    log.record(t, row, i, decision.reason, views)
    return pool[i]
