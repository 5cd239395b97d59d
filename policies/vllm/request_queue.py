"""Waiting queues of vLLM's V1 scheduler (vLLM's `request_queue.py`): FCFS deque and priority heap."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator

from ..request import Request


class FCFSRequestQueue:
    """Arrival order; preempted requests go back to the front."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    def add_request(self, request: Request) -> None:
        """Append a new arrival."""
        self._queue.append(request)

    def peek_request(self) -> Request:
        """The next request to admit."""
        return self._queue[0]

    def pop_request(self) -> Request:
        """Remove and return the next request."""
        return self._queue.popleft()

    def prepend_request(self, request: Request) -> None:
        """Put a preempted request at the front."""
        self._queue.appendleft(request)

    def prepend_requests(self, requests: list[Request]) -> None:
        """Put requests skipped this step back at the front, in their original order."""
        self._queue.extendleft(reversed(requests))

    def remove_requests(self, requests: set[Request]) -> None:
        """Drop finished/aborted requests."""
        self._queue = deque(r for r in self._queue if r not in requests)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)


class PriorityRequestQueue:
    """Lowest (priority, arrival_time, request_id) first; prepend is a plain insert."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, str, Request]] = []

    def add_request(self, request: Request) -> None:
        """Insert by priority."""
        heapq.heappush(self._heap, (request.priority, request.arrival_time, request.request_id, request))

    def peek_request(self) -> Request:
        """The highest-priority request."""
        return self._heap[0][3]

    def pop_request(self) -> Request:
        """Remove and return the highest-priority request."""
        return heapq.heappop(self._heap)[3]

    def prepend_request(self, request: Request) -> None:
        """No front in a heap: insert by priority (as vLLM)."""
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        """Re-insert skipped requests by priority."""
        for r in requests:
            self.add_request(r)

    def remove_requests(self, requests: set[Request]) -> None:
        """Drop finished/aborted requests."""
        self._heap = [e for e in self._heap if e[3] not in requests]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (e[3] for e in sorted(self._heap, key=lambda e: e[:3]))


RequestQueue = FCFSRequestQueue | PriorityRequestQueue


def create_request_queue(scheduling_policy: str) -> RequestQueue:
    """The waiting queue for "fcfs" or "priority"."""
    return PriorityRequestQueue() if scheduling_policy == "priority" else FCFSRequestQueue()
