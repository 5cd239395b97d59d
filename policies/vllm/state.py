"""The vLLM scheduler's state, declared once for the mixins that share it.

Compiled (schedsim.accel), the scheduler is a native class: its attributes are C fields, and the
mixins are mypyc traits that must name every attribute they touch. `VllmState` is that list.
"""

from __future__ import annotations

from typing import Any

from mypy_extensions import trait

from ..kv_cache import KVCacheManager
from ..request import Request
from .queues import FCFSQueue, PriorityQueue


@trait
class VllmState:
    """Attributes of VllmScheduler read by LifecycleMixin, OutputMixin and FastForwardMixin."""

    config: Any  # a VllmConfig (FastForwardBase's own declaration is the untyped one)
    kv: KVCacheManager
    requests: dict[str, Request]
    running: list[Request]
    waiting: FCFSQueue | PriorityQueue
    priority: bool
    max_num_active: int
    num_spec_tokens: int
    finished_req_ids: list[str]
    preempted_req_ids: list[str]
    recompute_frontier: dict[str, int]
    current_step: int
    max_concurrent_batches: int
    is_async: bool

    def _free_request(self, request: Request) -> None:
        """A finished request: report it, release its blocks, forget it (LifecycleMixin's)."""
        raise NotImplementedError
