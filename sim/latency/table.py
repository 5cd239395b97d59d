"""Table latency model: per-operator interpolation over measured profiles (work in progress)."""

from __future__ import annotations

from typing import Any

from .specs import GpuSpec, ModelSpec


def find_profile(model: ModelSpec, gpu: GpuSpec, tp: int, calibration: dict[str, Any] | None = None):
    """The measured profile for (model, gpu, tp), or None."""
    return None


class TableModel:  # pragma: no cover - replaced in the next commit
    """Placeholder until the profile import lands."""

    def __init__(self, profile: Any, roofline: Any) -> None:
        raise NotImplementedError
