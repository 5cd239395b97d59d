"""SGLangConfig: SGLang 0.5.x scheduler knobs (server args and SGLANG_* environment defaults)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import SchedulerConfig


@dataclass
class SGLangConfig(SchedulerConfig):
    """Knobs named as SGLang's server arguments; max_num_seqs plays max_running_requests.

    chunked_prefill_size defaults to max_num_batched_tokens (None there: the shared budget knob
    is honoured rather than ignored); enable_chunked_prefill=False is SGLang's
    `--chunked-prefill-size -1`. A page is one KV block (page_size == block_size).
    """

    schedule_policy: str = "fcfs"  # SGLang's --schedule-policy: "fcfs" or cache-aware "lpm"
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    enable_mixed_chunk: bool = False
    disable_overlap_schedule: bool = False
    enable_skip_finishing_decode: bool = True
    schedule_conservativeness: float = 1.0
    init_new_token_ratio: float = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO
    min_new_token_ratio_factor: float = 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
    new_token_ratio_decay_steps: int = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
    retract_decode_steps: int = 20  # SGLANG_RETRACT_DECODE_STEPS
    clip_max_new_tokens: int = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION

    def __post_init__(self) -> None:
        """Resolve the chunk size and reject impossible values, naming the field."""
        super().__post_init__()
        name = type(self).__name__
        if self.chunked_prefill_size is None and self.enable_chunked_prefill:
            self.chunked_prefill_size = self.max_num_batched_tokens
        if not self.enable_chunked_prefill:
            self.chunked_prefill_size = None
        if self.chunked_prefill_size is not None and self.chunked_prefill_size < self.block_size:
            raise ValueError(
                f"{name}.chunked_prefill_size must be >= block_size ({self.block_size}), "
                f"got {self.chunked_prefill_size}"
            )
        for field in ("max_prefill_tokens", "new_token_ratio_decay_steps", "clip_max_new_tokens"):
            if getattr(self, field) < 1:
                raise ValueError(f"{name}.{field} must be >= 1, got {getattr(self, field)}")
        if self.retract_decode_steps < 0:
            raise ValueError(f"{name}.retract_decode_steps must be >= 0, got {self.retract_decode_steps}")
        if self.schedule_conservativeness <= 0:
            raise ValueError(
                f"{name}.schedule_conservativeness must be > 0, got {self.schedule_conservativeness}"
            )
        for field in ("init_new_token_ratio", "min_new_token_ratio_factor"):
            if not 0.0 <= getattr(self, field) <= 1.0:
                raise ValueError(f"{name}.{field} must be in [0, 1], got {getattr(self, field)}")
        if self.schedule_policy not in ("fcfs", "lpm"):
            raise ValueError(f"{name}.schedule_policy must be 'fcfs' or 'lpm', got {self.schedule_policy!r}")
        if self.schedule_policy == "lpm" and self.scheduling_policy == "priority":
            raise ValueError(
                f"{name}: schedule_policy 'lpm' ignores priorities; use scheduling_policy 'fcfs' with it"
            )
        if self.enable_mixed_chunk and not self.enable_chunked_prefill:
            raise ValueError(f"{name}.enable_mixed_chunk needs enable_chunked_prefill")

    @property
    def page_size(self) -> int:
        """SGLang's page: one KV block here."""
        return self.block_size
