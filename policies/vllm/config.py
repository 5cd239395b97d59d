"""VllmConfig: vLLM 0.33.0 SchedulerConfig/CacheConfig knobs the V1 scheduler reads."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import SchedulerConfig

SPEC_METHODS = ("draft_model", "ngram")
# KVTransferConfig.kv_role: which side of a prefill/decode pair the replica's KV connector serves
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
# KVTransferConfig.kv_load_failure_policy: a failed KV load is recomputed locally, or fails the request
KV_LOAD_FAILURE_POLICIES = ("recompute", "fail")


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
    # Speculative decoding's proposer (SpeculativeConfig.method) when num_spec_tokens > 0:
    # "draft_model" drafts with a model of its own (one extra input slot per scheduled request,
    # num_spec_tokens KV lookahead slots); "ngram" matches the prompt on the CPU (neither).
    spec_method: str = "draft_model"
    # KV connector (KVTransferConfig.kv_role, NIXL's scheduler side): None runs without one;
    # "kv_producer" / "kv_consumer" / "kv_both" serve the prefill / decode / either side of a
    # prefill/decode pair. A consumer with >1 batch in flight defers block frees (vLLM's rule).
    kv_role: str | None = None
    # KVTransferConfig.kv_load_failure_policy with a connector (vLLM's own default is "fail");
    # without one vLLM always recomputes.
    kv_load_failure_policy: str = "recompute"

    @property
    def is_kv_consumer(self) -> bool:
        """KVTransferConfig.is_kv_consumer: the connector loads remote KV (decode side)."""
        return self.kv_role in ("kv_consumer", "kv_both")

    @property
    def is_kv_producer(self) -> bool:
        """KVTransferConfig.is_kv_producer: the connector hands KV to a remote decode."""
        return self.kv_role in ("kv_producer", "kv_both")

    @property
    def uses_draft_model(self) -> bool:
        """SpeculativeConfig.uses_draft_model(): drafts come from a draft model's forward passes."""
        return self.num_spec_tokens > 0 and self.spec_method == "draft_model"

    @property
    def max_num_new_slots_for_drafting(self) -> int:
        """SpeculativeConfig.max_num_new_slots_for_drafting: input-budget slots each scheduled
        request costs on top of its tokens (the autoregressive draft model keeps one more)."""
        return 1 if self.uses_draft_model else 0

    @property
    def num_lookahead_tokens(self) -> int:
        """VllmConfig.num_lookahead_tokens: KV slots reserved past the scheduled tokens, where the
        draft model writes its drafts' KV."""
        return self.num_spec_tokens if self.uses_draft_model else 0

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
        if self.spec_method not in SPEC_METHODS:
            raise ValueError(f"{name}.spec_method must be one of {SPEC_METHODS}, got {self.spec_method!r}")
        if self.kv_role is not None and self.kv_role not in KV_ROLES:
            raise ValueError(f"{name}.kv_role must be None or one of {KV_ROLES}, got {self.kv_role!r}")
        if self.kv_load_failure_policy not in KV_LOAD_FAILURE_POLICIES:
            raise ValueError(
                f"{name}.kv_load_failure_policy must be one of {KV_LOAD_FAILURE_POLICIES}, "
                f"got {self.kv_load_failure_policy!r}"
            )
        if self.max_num_batched_tokens <= self.num_lookahead_tokens:
            raise ValueError(
                f"{name}.max_num_batched_tokens ({self.max_num_batched_tokens}) must exceed "
                f"num_lookahead_tokens ({self.num_lookahead_tokens}, the draft model's "
                "num_spec_tokens)"
            )
        need = -(-self.max_model_len // self.block_size)
        if need > self.num_gpu_blocks - 1:
            raise ValueError(
                f"{name}.num_gpu_blocks: {self.num_gpu_blocks - 1} usable blocks cannot "
                f"hold one max_model_len={self.max_model_len} sequence ({need} blocks)"
            )
