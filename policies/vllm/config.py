"""VllmConfig: vLLM 0.33.0 SchedulerConfig/CacheConfig knobs the V1 scheduler reads."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import SchedulerConfig


@dataclass
class VllmConfig(SchedulerConfig):
    """vLLM's defaults: reserve the full input sequence at admission, no watermark, no defer-free."""

    # Admission into RUNNING (vLLM's max_num_active_seqs); None means max_num_seqs.
    max_num_active_seqs: int | None = None
    # Floor the long-prefill cap at max_num_batched_tokens // eligible requests.
    long_prefill_token_threshold_adaptive: bool = False
    # Admit a waiting request only if its whole known sequence fits in free blocks now.
    scheduler_reserve_full_isl: bool = True
    # Fraction of all blocks kept free when admitting waiting/preempted requests.
    watermark: float = 0.0
    # Keep freed blocks out of the pool until no in-flight step can still write them (vLLM turns
    # this on only for a KV-consumer connector with >1 batch in flight).
    defer_block_free: bool = False

    def __post_init__(self) -> None:
        """vLLM's own config checks, naming the field."""
        super().__post_init__()
        name = type(self).__name__
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"{name}.max_num_batched_tokens ({self.max_num_batched_tokens}) must be "
                f">= max_num_seqs ({self.max_num_seqs})"
            )
        if self.max_num_active_seqs is not None and not 1 <= self.max_num_active_seqs <= self.max_num_seqs:
            raise ValueError(
                f"{name}.max_num_active_seqs ({self.max_num_active_seqs}) must be in "
                f"[1, max_num_seqs={self.max_num_seqs}]"
            )
        if self.long_prefill_token_threshold > self.max_model_len:
            raise ValueError(
                f"{name}.long_prefill_token_threshold ({self.long_prefill_token_threshold}) "
                f"cannot exceed max_model_len ({self.max_model_len})"
            )
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"{name}.watermark must be in [0, 1), got {self.watermark}")
        need = -(-self.max_model_len // self.block_size)
        if need > self.num_gpu_blocks - 1:
            raise ValueError(
                f"{name}.num_gpu_blocks: {self.num_gpu_blocks - 1} usable blocks cannot "
                f"hold one max_model_len={self.max_model_len} sequence ({need} blocks)"
            )
