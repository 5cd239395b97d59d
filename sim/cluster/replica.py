"""One replica of a cluster: a SimWorld fed by an inbox, and the view a router gets of it."""

from __future__ import annotations

from dataclasses import dataclass

from schedsim.policies import Request
from schedsim.policies.kv_cache import KVCacheManager
from schedsim.policies.routers import ReplicaView, RouteRequest
from schedsim.worlds.inbox import Inbox
from schedsim.worlds.simpy_world import SimWorld


@dataclass(slots=True)
class Scrape:
    """A replica's metrics endpoint as read at `at`."""

    at: float
    num_running: int
    num_waiting: int
    kv_usage: float


class Replica:
    """An engine behind the router: its world, inbox and the last scrape of its metrics."""

    def __init__(self, index: int, world: SimWorld, inbox: Inbox) -> None:
        self.index = index
        self.world, self.inbox = world, inbox
        self.policy = world.engine.policy
        kv = getattr(self.policy, "kv", None)
        self.kv: KVCacheManager | None = kv if isinstance(kv, KVCacheManager) else None
        self.last_scrape = self.scrape(world.env.now)
        self.num_routed = 0

    def admit(self, row: int, request: Request, target_output_tokens: int) -> None:
        """The request was routed here: its oracle and recorder follow it from now on."""
        self.world.executor.oracle.add(request.request_id, target_output_tokens)
        if self.world.metrics is not None:
            self.world.metrics.admit(row, request)
        self.num_routed += 1

    def num_outstanding(self) -> int:
        """Requests routed here and not finished: in the inbox, held or live in the engine."""
        engine = self.world.engine
        return self.inbox.num_pending_requests + len(engine.held) + len(engine.requests)

    def scrape(self, now: float) -> Scrape:
        """The replica's metrics as they stand now (exact: every replica has caught up to now)."""
        running, waiting = self.policy.get_request_counts()
        return Scrape(now, running, waiting, float(self.policy.kv_usage()))

    def view(self, now: float, live: bool) -> ReplicaView:
        """What the router sees: live metrics, or the last scrape; its own outstanding count."""
        s = self.scrape(now) if live else self.last_scrape
        return ReplicaView(
            self.index,
            s.num_running,
            s.num_waiting,
            s.kv_usage,
            s.at,
            self.num_outstanding(),
            self.cached_prefix_blocks if self.kv is not None else None,
        )

    def cached_prefix_blocks(self, request: RouteRequest) -> int:
        """Leading prompt blocks of `request` this replica's KV cache holds (a read-only lookup)."""
        kv = self.kv
        if kv is None or not request.prompt_block_hashes:
            return 0
        probe = Request(
            request.request_id,
            request.arrival_time,
            request.prompt_len,
            1,
            prompt_block_hashes=request.prompt_block_hashes,
        )
        return kv.get_computed_blocks(probe)[1] // kv.block_size
