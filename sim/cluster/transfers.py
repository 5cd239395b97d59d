"""KV transfers between the prefill and the decode pool, in the cluster's SimPy environment.

The conversation (`schedsim.policies.kv_transfer`), as the cluster carries it:
- a prefill replica's launched plan lists a finished request in `kv_reqs_to_send`: the send is
  announced at the launch time, and the cluster hands the request to the decode pool then;
- a decode replica's launched plan lists it in `kv_reqs_to_recv` (tokens to load): the transfer is
  requested at the launch and starts when that step starts on the GPU (the worker starts the load
  before its forward pass); it moves whole blocks over the link (`schedsim.cluster.link`);
- when it ends (last byte plus the link latency), the decode replica's next collected StepResult
  whose step ended by then carries it in `finished_recving` (or `failed_kv_load_ids` for a load
  chosen to fail), and the prefill replica's next one in `finished_sending`.
Every transfer is one row of the transfers table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import simpy
from schedsim.cluster.interconnect import InterconnectSpec, transfer_blocks
from schedsim.cluster.link import Flow, LinkModel
from schedsim.metrics.column import Column
from schedsim.policies import StepPlan, StepResult
from schedsim.worlds.inbox import Inbox


class TransferLog:
    """One row per transfer, as columns (the transfers table)."""

    def __init__(self, link: str) -> None:
        self.link = link
        self.request_id: list[str] = []
        self.src = Column("q")
        self.dst = Column("q")
        self.tokens = Column("q")
        self.blocks = Column("q")
        self.bytes = Column("q")  # the whole KV moved: every GPU's shard
        self.requested = Column("d")
        self.start = Column("d")
        self.failed = Column("b")
        self.flows: list[Flow] = []  # done and end times, set when each finishes sending

    def __len__(self) -> int:
        return len(self.request_id)


class KVPort:
    """One replica's end of the transfers (implements `schedsim.worlds.kv_port.KVTransferPort`)."""

    def __init__(self, hub: TransferHub, index: int) -> None:
        self.hub, self.index = hub, index
        self.sends: list[Flow] = []  # undelivered transfers from here
        self.recvs: list[Flow] = []  # undelivered transfers to here
        # sends the decode side dropped before loading (a 0-token notification): (when, request id)
        self.cancelled: list[tuple[float, str]] = []
        self.announced: set[str] = set()  # sends announced, not yet started

    def on_launch(self, plan: StepPlan, requested: float, start: float) -> None:
        """Announce the plan's sends; request its loads, which start with the step."""
        hub = self.hub
        for rid, tokens in plan.kv_reqs_to_send.items():
            hub.announce(self.index, rid, tokens, requested)
        for rid, tokens in plan.kv_reqs_to_recv.items():
            hub.request(self.index, rid, tokens, requested, start)

    def deliver(self, result: StepResult, t: float) -> None:
        """Fill the result with this replica's transfers that ended by t."""
        self.hub.settle(t)
        if self.sends:
            left = []
            for f in self.sends:
                if f.end <= t:
                    result.finished_sending.add(self.hub.ids[f.index])
                else:
                    left.append(f)
            self.sends = left
        if self.cancelled:
            result.finished_sending.update(rid for at, rid in self.cancelled if at <= t)
            self.cancelled = [(at, rid) for at, rid in self.cancelled if at > t]
        if self.recvs:
            left = []
            for f in self.recvs:
                if f.end <= t:
                    rid = self.hub.ids[f.index]
                    if self.hub.failed[f.index]:
                        result.failed_kv_load_ids.add(rid)
                    else:
                        result.finished_recving.add(rid)
                else:
                    left.append(f)
            self.recvs = left

    def ready(self, t: float) -> bool:
        """A transfer of this replica ended by t, not yet delivered."""
        self.hub.settle(t)
        return (
            any(f.end <= t for f in self.sends)
            or any(f.end <= t for f in self.recvs)
            or any(at <= t for at, _ in self.cancelled)
        )

    def busy(self) -> bool:
        """Anything of this replica announced, in flight or undelivered."""
        return bool(self.sends or self.recvs or self.cancelled or self.announced)

    def next_end(self) -> float:
        """The earliest end among this replica's undelivered transfers that have ended sending
        (inf: none); transfers still sending end after the link's next event."""
        ends = [f.end for f in self.sends if f.end == f.end] + [f.end for f in self.recvs if f.end == f.end]
        ends += [at for at, _ in self.cancelled]
        return min(ends, default=math.inf)


class TransferHub:
    """The link, the transfers on it, and the ports of every replica."""

    def __init__(
        self,
        env: simpy.Environment,
        spec: InterconnectSpec,
        shard_block_bytes: Sequence[int],
        tp: Sequence[int],
        block_size: int,
        on_send: Callable[[int, str, int], None],
        failures: set[str],
    ) -> None:
        n = len(shard_block_bytes)
        self.env, self.spec = env, spec
        self.link = LinkModel(spec, n)
        self.shard_block_bytes, self.tp, self.block_size = list(shard_block_bytes), list(tp), block_size
        self.on_send = on_send  # (prefill replica, request id, tokens): hand it to the decode pool
        self.failures = set(failures)  # request ids whose (first) load fails
        self.ports = [KVPort(self, i) for i in range(n)]
        self.inboxes: list[Inbox | None] = [None] * n  # woken when a transfer of theirs ends
        self.source: dict[str, int] = {}  # request id -> prefill replica holding its KV
        self.log = TransferLog(spec.name)
        self.ids: list[str] = []  # transfer index -> request id
        self.failed: list[bool] = []
        self.timer_at = math.inf

    # ---- the replicas' side ----
    def announce(self, src: int, rid: str, tokens: int, t: float) -> None:
        """A prefill replica holds rid's KV from t on: the decode pool gets the request at t."""
        self.source[rid] = src
        self.ports[src].announced.add(rid)
        self._at(t, lambda: self.on_send(src, rid, tokens))

    def request(self, dst: int, rid: str, tokens: int, requested: float, start: float) -> None:
        """A decode replica loads `tokens` of rid's KV; the transfer starts at `start`."""
        src = self.source.get(rid)
        if src is None:
            raise RuntimeError(f"replica {dst} loads the KV of request {rid}, which no prefill replica sent")
        port = self.ports[src]
        port.announced.discard(rid)
        if tokens == 0:  # a notification, not a load: the decode side dropped the request first
            port.cancelled.append((start + self.spec.latency, rid))
            self._at(start + self.spec.latency, lambda: self._wake(src))
            return
        blocks = transfer_blocks(tokens, self.block_size)
        i = len(self.ids)
        flow = Flow(i, src, dst, float(blocks * self.shard_block_bytes[src]))
        self.ids.append(rid)
        failed = rid in self.failures
        self.failures.discard(rid)
        self.failed.append(failed)
        log = self.log
        log.request_id.append(rid)
        log.src.append(src)
        log.dst.append(dst)
        log.tokens.append(tokens)
        log.blocks.append(blocks)
        log.bytes.append(blocks * self.shard_block_bytes[src] * self.tp[src])
        log.requested.append(requested)
        log.start.append(start)
        log.failed.append(failed)
        log.flows.append(flow)
        port.sends.append(flow)
        self.ports[dst].recvs.append(flow)
        self._at(start, lambda: self._join(flow))

    def release(self, rid: str, t: float) -> None:
        """No decode side will read rid's KV (the first token ended the request): the prefill
        side frees its blocks at t."""
        src = self.source[rid]
        port = self.ports[src]
        port.announced.discard(rid)
        port.cancelled.append((t, rid))
        self._wake(src)

    def settle(self, t: float) -> None:
        """Settle the link up to t (every transfer that could join by t has joined)."""
        self._finished(self.link.advance(t))

    # ---- the link's side ----
    def _at(self, t: float, action: Callable[[], None]) -> None:
        """Run `action` when the shared clock reaches t."""
        ev = self.env.timeout(t - self.env.now if t > self.env.now else 0.0)
        ev.callbacks.append(lambda _: action())

    def _join(self, flow: Flow) -> None:
        """A transfer joins the link now."""
        self._finished(self.link.add(self.env.now, flow))

    def _finished(self, flows: list[Flow]) -> None:
        """Transfers that sent their last byte: log their ends, wake both replicas at the end."""
        for f in flows:
            self._at(f.end, self._waker(f.src, f.dst))
        self._timer()

    def _waker(self, src: int, dst: int) -> Callable[[], None]:
        """Wake both ends of a transfer."""

        def wake() -> None:
            self._wake(src)
            self._wake(dst)

        return wake

    def _timer(self) -> None:
        """A wake-up at the link's next completion, so completions happen in the clock's order."""
        d = self.link.next_done()
        if d < math.inf and d != self.timer_at:
            self.timer_at = d
            self._at(d, self._fire)

    def _fire(self) -> None:
        """A completion may be due now."""
        self.timer_at = math.inf
        self.settle(self.env.now)

    def _wake(self, i: int) -> None:
        """Wake replica i if it waits."""
        inbox = self.inboxes[i]
        if inbox is not None:
            inbox.wake()
