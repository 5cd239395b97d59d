"""The shared link between replicas: concurrent KV transfers split each NIC's bandwidth.

Topology: every replica has one NIC per GPU, full duplex, with the interconnect's bandwidth in
each direction; a TP group's GPUs move their KV shards in parallel, so a replica is modelled as
one NIC carrying one GPU's shard. A transfer from replica p to replica d uses p's egress and d's
ingress. Each NIC direction splits its bandwidth equally among the transfers through it, and a
transfer moves at the smaller of its two shares (bandwidth a transfer cannot use at its other end
is not handed to the others). Rates change only when a transfer joins or leaves, so between
changes every transfer moves at a constant rate and its completion is closed form. A transfer's
data leaves the link when its last byte is sent (`done`); it is delivered the fixed latency
later (`end`).

Pure bookkeeping in time order, no SimPy: `add` and `advance` are called with non-decreasing
times (`schedsim.cluster.transfers` drives it from the shared environment).
"""

from __future__ import annotations

import math

from schedsim.cluster.interconnect import InterconnectSpec


class Flow:
    """One transfer on the link: one GPU's shard of a request's KV, from `src` to `dst`."""

    __slots__ = ("index", "src", "dst", "size", "remaining", "rate", "joined", "done", "end")

    def __init__(self, index: int, src: int, dst: int, size: float) -> None:
        self.index, self.src, self.dst, self.size = index, src, dst, size
        self.remaining = size  # bytes not yet sent, as of the link's last rate change
        self.rate = 0.0
        self.joined = math.nan
        self.done = math.nan  # last byte sent
        self.end = math.nan  # delivered: done + latency


class LinkModel:
    """Equal shares per NIC direction; a transfer at the smaller of its egress and ingress share."""

    def __init__(self, spec: InterconnectSpec, num_replicas: int) -> None:
        self.spec = spec
        self.now = -math.inf  # time of the last rate change
        self.seen = -math.inf  # latest time completions were settled up to
        self.active: list[Flow] = []
        self.egress = [0] * num_replicas
        self.ingress = [0] * num_replicas

    def add(self, t: float, flow: Flow) -> list[Flow]:
        """A transfer joins at t; returns the transfers that finished sending by t first."""
        if t < self.seen:
            raise RuntimeError(f"transfer joins the link at {t} after it was settled up to {self.seen}")
        finished = self.advance(t)
        self._progress(t)
        flow.joined = t
        if flow.size <= 0:
            flow.done, flow.end = t, t + self.spec.latency
            return finished + [flow]
        self.active.append(flow)
        self.egress[flow.src] += 1
        self.ingress[flow.dst] += 1
        self._rates()
        return finished

    def next_done(self) -> float:
        """When the next active transfer sends its last byte at today's rates (inf: none)."""
        now = self.now
        return min((now + f.remaining / f.rate for f in self.active), default=math.inf)

    def advance(self, t: float) -> list[Flow]:
        """Settle every completion up to t, in time order; returns the transfers that finished."""
        if t > self.seen:
            self.seen = t
        out: list[Flow] = []
        while self.active:
            d = self.next_done()
            if d > t:
                break
            now = self.now
            left: list[Flow] = []
            for f in self.active:
                if now + f.remaining / f.rate <= d:
                    f.remaining, f.done, f.end = 0.0, d, d + self.spec.latency
                    self.egress[f.src] -= 1
                    self.ingress[f.dst] -= 1
                    out.append(f)
                else:
                    f.remaining -= f.rate * (d - now)
                    left.append(f)
            self.active = left
            self.now = d
            self._rates()
        return out

    def _progress(self, t: float) -> None:
        """Bytes sent between the last rate change and t, before the rates change at t."""
        if t > self.now:
            dt = t - self.now
            for f in self.active:
                f.remaining -= f.rate * dt
            self.now = t

    def _rates(self) -> None:
        """Each transfer's rate: the NIC bandwidth over the busier of its two NIC directions."""
        bw = self.spec.bandwidth
        for f in self.active:
            n = self.egress[f.src]
            m = self.ingress[f.dst]
            f.rate = bw / (n if n > m else m)
