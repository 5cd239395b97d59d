"""Session affinity: every request of a conversation goes to the replica that served its first
turn (that replica holds the conversation's KV), new sessions to the least loaded replica."""

from __future__ import annotations

from collections.abc import Sequence

from .interface import Decision, ReplicaView, RouteRequest, least_loaded
from .registry import RouterConfig, register_router


@register_router("session-affinity", "a session's requests stick to its first replica; new ones least loaded")
class SessionAffinityRouter:
    """Sticky sessions keyed by the request's session id (requests without one: least loaded)."""

    def __init__(self, config: RouterConfig | None = None) -> None:
        self.home: dict[str, int] = {}  # session id -> replica of its first turn

    def route(self, request: RouteRequest, views: Sequence[ReplicaView]) -> Decision:
        """The session's replica, or the least loaded for a new or session-less request."""
        sid = request.session_id
        if sid is not None and sid in self.home:
            return Decision(self.home[sid], "session")
        i = least_loaded(views)
        if sid is None:
            return Decision(i, "no-session")
        self.home[sid] = i
        return Decision(i, "new-session")
