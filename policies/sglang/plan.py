"""SGLangStepPlan: the StepPlan plus what SGLang's overlap loop makes observable."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..plan import StepPlan


@dataclass  # no slots=True: they would shadow the compiled StepPlan's own fields (schedsim.accel)
class SGLangStepPlan(StepPlan):
    """A StepPlan with SGLang's forward mode, request-pool slots and future-token slots.

    `future_token_slots[rid] = slot` marks a decode whose input token is the previous step's
    sampled token, still unknown on the CPU when this step was planned: the device reads it from
    the FutureMap's `output_tokens_buf[slot]` (0.5.x `resolve_forward_inputs`). These are the
    overlap loop's placeholders. `decoding_req_ids` are the decodes riding a mixed batch
    (SGLang's `decoding_reqs`): their result inserts nothing into the radix tree.
    """

    forward_mode: str = "idle"  # "extend", "decode", "mixed" or "idle"
    req_pool_indices: dict[str, int] = field(default_factory=dict)
    future_token_slots: dict[str, int] = field(default_factory=dict)
    chunked_req_id: str | None = None
    decoding_req_ids: list[str] = field(default_factory=list)
