"""A replica's inbox: hands out what the router sent when due, with the input stream's rules
(an arrival ahead holds later aborts back from an aborts-only poll), and bounds fast-forward by
the router's next action."""

from __future__ import annotations

import pytest
import simpy
from schedsim.policies import Request
from schedsim.worlds.inbox import Inbox

pytestmark = pytest.mark.pure_python


def req(rid: str, t: float) -> Request:
    return Request(rid, t, 10, 5)


def make(router_next: list[float | None], router_abort: list[float | None]) -> Inbox:
    return Inbox(simpy.Environment(), lambda: router_next[0], lambda: router_abort[0])


def test_take_hands_out_what_is_due_in_order() -> None:
    box = make([None], [None])
    box.put_request(1.0, req("a", 1.0))
    box.put_abort(1.0, "x")
    box.put_request(2.0, req("b", 2.0))
    assert box.num_pending_requests == 2
    got = box.take(1.5)
    assert [r.request_id for r in got.requests] == ["a"] and got.abort_ids == ["x"]
    assert box.num_pending_requests == 1
    assert not box.take(1.9)
    assert [r.request_id for r in box.take(2.0).requests] == ["b"]


def test_aborts_only_poll_stops_at_a_request() -> None:
    box = make([None], [None])
    box.put_abort(1.0, "x")
    box.put_request(1.0, req("a", 1.0))
    box.put_abort(1.0, "y")
    got = box.take(1.0, aborts_only=True)
    assert got.abort_ids == ["x"] and not got.requests
    assert box.next_abort_poll_time() is None  # the request at the head holds "y" back
    got = box.take(1.0)
    assert [r.request_id for r in got.requests] == ["a"] and got.abort_ids == ["y"]


def test_horizons_include_the_router() -> None:
    router_next, router_abort = [3.0], [4.0]
    box = make(router_next, router_abort)
    assert box.next_pending() is None
    assert box.next_time() == 3.0 and box.next_abort_poll_time() == 4.0
    box.put_request(2.5, req("a", 2.5))
    assert box.next_time() == 2.5 and box.next_pending() == 2.5
    box.take(2.5)
    box.put_abort(5.0, "a")
    assert box.next_time() == 3.0 and box.next_abort_poll_time() == 5.0
    box.take(5.0)
    box.close()
    assert box.next_time() is None and box.next_abort_poll_time() is None
    assert box.wait_event() is None


def test_an_idle_engine_wakes_when_fed() -> None:
    env = simpy.Environment()
    box = Inbox(env, lambda: None, lambda: None)
    woke: list[float] = []

    def engine():
        yield box.wait_event()
        woke.append(env.now)

    def router():
        yield env.timeout(7.0)
        box.put_request(7.0, req("a", 7.0))

    env.process(engine())
    env.process(router())
    env.run()
    assert woke == [7.0]
