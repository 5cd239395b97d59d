"""Prefill/decode disaggregation: the hand-off from the prefill pool to the decode pool.

Arrivals are routed among the prefill replicas (the router process, `pool` = the prefill pool),
each as a request with `max_tokens=1` and `KVTransferParams(do_remote_decode=True)`. When a
prefill replica announces a send (`kv_reqs_to_send`), the hand-off routes the request among the
decode replicas with the decode pool's router and submits a new Request: same id, prompt and
block hashes, the workload's max_tokens, `KVTransferParams(do_remote_prefill=True,
remote_engine_id=<prefill replica>)`; where the decode side's engine takes the first token from
the prefill side (TensorRT-LLM's generation-only request), that token is the Request's only
output token, and a request that token ended (its length cap or a stop token) is not handed
over: the prefill side frees its blocks, as TensorRT-LLM's disaggregated server skips the
generation request then. Client aborts follow the request to the replica holding it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import simpy
from schedsim.cluster.replica import Replica
from schedsim.cluster.routing import RouterProcess, RoutingLog, route_in_pool
from schedsim.cluster.transfers import KVPort, TransferHub
from schedsim.policies import KVTransferParams, Request, RequestStatus
from schedsim.policies.routers import Router, RouteRequest
from schedsim.worlds.inbox import Inbox


class PDInbox(Inbox):
    """A replica's inbox in a P/D cluster: fast-forward also stops before the environment's next
    event (a prefill replica may hand a request to the decode pool, or a transfer join or end,
    at any event) and before an undelivered transfer of this replica ends."""

    def __init__(
        self,
        env: simpy.Environment,
        feeder_next_time: Callable[[], float | None],
        feeder_next_abort_time: Callable[[], float | None],
    ) -> None:
        super().__init__(env, feeder_next_time, feeder_next_abort_time)
        self.port: KVPort | None = None

    def bound(self, t: float | None) -> float | None:
        """The earlier of t and the next event that could change what this replica sees."""
        b = self.env.peek()
        if self.port is not None:
            e = self.port.next_end()
            b = e if e < b else b
        if t is not None and t < b:
            return t
        return None if b == math.inf else b

    def next_time(self) -> float | None:
        """The inbox's own horizon, bounded by the environment and this replica's transfers."""
        return self.bound(super().next_time())

    def next_abort_poll_time(self) -> float | None:
        """Likewise for the mid-iteration (aborts-only) poll."""
        return self.bound(super().next_abort_poll_time())


class HandOff:
    """Routes each announced send among the decode replicas and submits its decode request."""

    def __init__(
        self,
        env: simpy.Environment,
        replicas: Sequence[Replica],
        pool: Sequence[int],
        router: Router,
        build: Callable[[int], tuple[Request, RouteRequest, int]],
        process: RouterProcess,
        live: bool,
        first_token_in: Sequence[bool],
    ) -> None:
        self.env, self.replicas, self.pool, self.router = env, replicas, list(pool), router
        self.build = build  # row -> a fresh full Request, what the router reads, target output
        self.process = process  # owner of each request id (aborts), row of each routed request
        self.live = live
        # per replica: its engine continues after the prefill's first token (carried in the request)
        self.first_token_in = list(first_token_in)
        self.log = RoutingLog(len(self.pool), self.pool)
        self.rows: dict[str, int] = {}  # request id -> workload row (filled by the prefill routing)
        self.decode_of: dict[str, int] = {}
        self.prefill_requests: dict[str, Request] = {}  # prefill-side Requests not yet handed over
        self.hub: TransferHub | None = None
        # the decode pool's engines take the prefill's first token (one rule for the whole pool)
        takes = {self.first_token_in[i] for i in self.pool}
        if len(takes) > 1:
            raise ValueError(
                "RunConfig.pd: the decode pool mixes engines that take the prefill's first token "
                "(TensorRT-LLM) with engines that sample it again (vLLM)"
            )
        self.pool_takes_first_token = takes == {True}

    def _ended_by_first_token(self, pre: Request) -> bool:
        """The prefill's first token was the request's last: a stop token, or a length cap of 1."""
        full_max_tokens = self.build(self.rows[pre.request_id])[0].max_tokens
        return pre.status == RequestStatus.FINISHED_STOPPED or full_max_tokens <= 1

    def __call__(self, src: int, rid: str, tokens: int) -> None:
        """Prefill replica `src` holds rid's KV now: route the decode request."""
        t = self.env.now
        row = self.rows[rid]
        if rid in self.decode_of:
            raise RuntimeError(f"request {rid} was sent to the decode pool twice")
        pre = self.prefill_requests.pop(rid, None)
        if self.pool_takes_first_token and pre is not None and self._ended_by_first_token(pre):
            assert self.hub is not None
            self.hub.release(rid, t)
            return
        request, info, target = self.build(row)
        request.kv_transfer_params = KVTransferParams(do_remote_prefill=True, remote_engine_id=src)
        i = route_in_pool(self.router, self.log, self.replicas, self.pool, row, t, request, info, self.live)
        self.decode_of[rid] = i
        self.process.owner[rid] = i
        rep = self.replicas[i]
        rep.admit(row, request, target)
        if self.first_token_in[i]:
            request.output_token_ids.append(rep.world.executor.oracle.token(request, 0))
        rep.inbox.put_request(t, request)
