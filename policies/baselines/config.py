"""The baselines' configurations (kept out of the compiled policy modules: a compiled dataclass
cannot extend the interpreted SchedulerConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import SchedulerConfig


@dataclass
class OrcaConfig(SchedulerConfig):
    """Orca has no chunked prefill; the budget caps a step's tokens (decodes count one each)."""

    enable_chunked_prefill: bool = False
    kv_reservation: str = "max_tokens"  # Orca's n_rsrv; "none": prompt KV only, preempt on OOM

    def __post_init__(self) -> None:
        """Orca runs whole prompts only."""
        super().__post_init__()
        if self.enable_chunked_prefill:
            raise ValueError("OrcaConfig.enable_chunked_prefill must be False: Orca runs whole prompts")
        if self.kv_reservation not in ("max_tokens", "none"):
            raise ValueError(
                f"OrcaConfig.kv_reservation must be 'max_tokens' or 'none', got {self.kv_reservation!r}"
            )


@dataclass
class SarathiConfig(SchedulerConfig):
    """Sarathi-Serve's knobs: the token budget is the chunk size (512 in the paper's setups)."""

    max_num_batched_tokens: int = 512
    enable_chunked_prefill: bool = True
    watermark: float = 0.01  # vLLM v0's admission watermark, which Sarathi-Serve inherits

    def __post_init__(self) -> None:
        """Stall-free batching needs chunked prefill."""
        super().__post_init__()
        if not self.enable_chunked_prefill:
            raise ValueError(
                "SarathiConfig.enable_chunked_prefill must be True (stall-free batching chunks prefills)"
            )
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"SarathiConfig.watermark must be in [0, 1), got {self.watermark}")


@dataclass
class StaticConfig(SchedulerConfig):
    """Request-level batching runs whole prompts; max_num_seqs is the batch size."""

    enable_chunked_prefill: bool = False

    def __post_init__(self) -> None:
        """Static batching runs whole prompts only."""
        super().__post_init__()
        if self.enable_chunked_prefill:
            raise ValueError(
                "StaticConfig.enable_chunked_prefill must be False: the batch runs whole prompts"
            )
