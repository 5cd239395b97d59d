"""A replica's inputs in a cluster: what the router (another SimPy process) sent it, in order.

Unlike a replayed `InputStream`, an inbox does not know its future: it holds only what was routed
to it so far. `next_time()` is therefore the earliest time anything could be due (the head of the
inbox, or the next time the feeding side acts), which is what fast-forward needs to never jump
over an input; an engine with nothing to do waits on `wait_event()` until the router feeds it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import simpy
from schedsim.engine.waits import Inputs
from schedsim.policies import Request


class Inbox:
    """Requests and aborts routed to one replica, handed out when due (same rules as InputStream)."""

    def __init__(
        self,
        env: simpy.Environment,
        feeder_next_time: Callable[[], float | None],
        feeder_next_abort_time: Callable[[], float | None],
    ) -> None:
        self.env = env
        self.feeder_next_time = feeder_next_time  # the next time the router may send or read anything
        self.feeder_next_abort_time = feeder_next_abort_time  # ... that an aborts-only poll could see
        self.items: deque[tuple[float, Request | None, str]] = deque()  # (time, request, abort id)
        self.num_pending_requests = 0
        self.closed = False
        self.waiter: Any = None  # the event an idle engine waits on

    # ---- the router's side ----
    def put_request(self, t: float, request: Request) -> None:
        """A request routed here, due at t."""
        self.items.append((t, request, ""))
        self.num_pending_requests += 1
        self.wake()

    def put_abort(self, t: float, request_id: str) -> None:
        """A client abort of a request routed here, due at t."""
        self.items.append((t, None, request_id))
        self.wake()

    def close(self) -> None:
        """Nothing will ever be routed here again."""
        self.closed = True
        self.wake()

    def wake(self) -> None:
        """Resume the engine waiting for input, if one does."""
        if self.waiter is not None:
            self.waiter.succeed()
            self.waiter = None

    # ---- the engine's side ----
    def next_pending(self) -> float | None:
        """When the oldest routed input is due (None: nothing routed is waiting)."""
        return self.items[0][0] if self.items else None

    def next_time(self) -> float | None:
        """The earliest time an input could be due here (None: none ever will)."""
        head = self.next_pending()
        feed = None if self.closed else self.feeder_next_time()
        if head is None:
            return feed
        return head if feed is None or head <= feed else feed

    def next_abort_poll_time(self) -> float | None:
        """When an aborts-only poll could next take something, or the router act on what it would
        change: an abort at the head, nothing behind a request at the head (it holds them back),
        else whatever the router says."""
        if self.items:
            t, request, _ = self.items[0]
            return t if request is None else None
        return None if self.closed else self.feeder_next_abort_time()

    def wait_event(self) -> Any:
        """An event fired when the router next sends something (None: closed and empty)."""
        if self.closed:
            return None
        self.waiter = self.env.event()
        return self.waiter

    def wait_any(self) -> Any:
        """An event fired at the next wake, closed or not (a KV transfer's end also wakes it)."""
        self.waiter = self.env.event()
        return self.waiter

    def take(self, now: float, aborts_only: bool = False) -> Inputs:
        """Inputs due by `now`; with aborts_only, requests due stay (and hold later aborts back)."""
        items = self.items
        out = Inputs()
        while items and items[0][0] <= now:
            _, request, abort_id = items[0]
            if request is None:
                out.abort_ids.append(abort_id)
            elif aborts_only:
                break
            else:
                out.requests.append(request)
                self.num_pending_requests -= 1
            items.popleft()
        return out
