"""Waiting queues of vLLM's V1 scheduler: FCFS deque and (priority, arrival) heap."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator

from ..request import Request


class FCFSQueue:
    """Arrival order; preempted requests go back to the front."""

    __slots__ = ("_q",)

    def __init__(self) -> None:
        self._q: deque[Request] = deque()

    def add(self, request: Request) -> None:
        """Append a new arrival."""
        self._q.append(request)

    def peek(self) -> Request:
        """The next request to admit."""
        return self._q[0]

    def pop(self) -> Request:
        """Remove and return the next request."""
        return self._q.popleft()

    def prepend(self, request: Request) -> None:
        """Put a preempted request at the front."""
        self._q.appendleft(request)

    def prepend_many(self, requests: list[Request]) -> None:
        """Put requests skipped this step back at the front, in their original order."""
        self._q.extendleft(reversed(requests))

    def remove_many(self, requests: set[Request]) -> None:
        """Drop finished/aborted requests."""
        self._q = deque(r for r in self._q if r not in requests)

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._q)


class PriorityQueue:
    """Lowest (priority, arrival_time, request_id) first; prepend is a plain insert."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, str, Request]] = []

    def add(self, request: Request) -> None:
        """Insert by priority."""
        heapq.heappush(self._heap, (request.priority, request.arrival_time, request.request_id, request))

    def peek(self) -> Request:
        """The highest-priority request."""
        return self._heap[0][3]

    def pop(self) -> Request:
        """Remove and return the highest-priority request."""
        return heapq.heappop(self._heap)[3]

    def prepend(self, request: Request) -> None:
        """No front in a heap: insert by priority (as vLLM)."""
        self.add(request)

    def prepend_many(self, requests: Iterable[Request]) -> None:
        """Re-insert skipped requests by priority."""
        for r in requests:
            self.add(r)

    def remove_many(self, requests: set[Request]) -> None:
        """Drop finished/aborted requests."""
        self._heap = [e for e in self._heap if e[3] not in requests]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (e[3] for e in sorted(self._heap, key=lambda e: e[:3]))
