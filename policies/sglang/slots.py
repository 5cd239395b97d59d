"""SGLang's request-pool slots (ReqToTokenPool rows) and the overlap loop's new-token ratio.

Slots matter in the overlap loop: the previous step's sampled token of a decode request is read
on the device from the FutureMap's `output_tokens_buf[req_pool_idx]`, so the plan names, for each
such request, the slot its input token is resolved from.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class ReqToTokenPool:
    """Rows 1..size (row 0 is CUDA-graph padding); alloc pops from the tail, free appends (LIFO)."""

    __slots__ = ("size", "free_slots", "slot_of")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"ReqToTokenPool.size must be >= 1, got {size}")
        self.size = size
        self.free_slots: list[int] = list(range(1, size + 1))
        self.slot_of: dict[str, int] = {}

    def available_size(self) -> int:
        """Free rows."""
        return len(self.free_slots)

    def alloc(self, request_ids: list[str]) -> list[int]:
        """Rows for requests that hold none yet, taken from the tail in order."""
        fresh = [rid for rid in request_ids if rid not in self.slot_of]
        if len(fresh) > len(self.free_slots):
            raise ValueError(f"ReqToTokenPool: {len(fresh)} rows wanted, {len(self.free_slots)} free")
        if fresh:
            rows = self.free_slots[-len(fresh) :]
            del self.free_slots[-len(fresh) :]
            self.slot_of.update(zip(fresh, rows, strict=True))
        return [self.slot_of[rid] for rid in request_ids]

    def free(self, request_id: str) -> None:
        """Return a request's row (no-op if it holds none)."""
        row = self.slot_of.pop(request_id, None)
        if row is not None:
            self.free_slots.append(row)

    def check_invariants(self) -> None:
        """Every row is either free or held by exactly one request."""
        held = list(self.slot_of.values())
        assert len(set(held)) == len(held), "a pool row is held twice"
        assert not set(held) & set(self.free_slots), "a held pool row is also free"
        assert sorted(held + self.free_slots) == list(range(1, self.size + 1)), "pool rows leaked"


@dataclass
class NewTokenRatioTracker:
    """How much of their remaining max_new_tokens running requests are assumed to still decode."""

    init: float
    min: float
    decay: float
    current: float = field(default=0.0)

    @classmethod
    def from_config(
        cls, init_ratio: float, conservativeness: float, min_factor: float, decay_steps: int
    ) -> NewTokenRatioTracker:
        """SGLang's defaults: start at 0.7, decay linearly to 0.7*0.14 over 600 decode steps."""
        init = min(init_ratio * conservativeness, 1.0)
        low = min(init * min_factor, 1.0)
        return cls(init=init, min=low, decay=(init - low) / decay_steps, current=init)

    def decay_step(self) -> None:
        """One decode batch built without retraction: trust the estimate a little less."""
        self.current = max(self.current - self.decay, self.min)

    def reset(self) -> None:
        """Fully idle: back to the initial estimate."""
        self.current = self.init

    @staticmethod
    def after_retract(outputs_and_caps: list[tuple[int, int]], retract_decode_steps: int) -> float:
        """Ratio re-estimated from the requests that survived a retraction."""
        decoded = sum(o for o, _ in outputs_and_caps)
        caps = sum(c for _, c in outputs_and_caps)
        return min(1.0, (decoded + retract_decode_steps * len(outputs_and_caps)) / (caps + 1))
