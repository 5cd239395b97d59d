"""SGLangStepPlan: the StepPlan plus what SGLang's overlap loop makes observable."""

from __future__ import annotations

from ..plan import StepPlan


class SGLangStepPlan(StepPlan):
    """A StepPlan with SGLang's forward mode, request-pool slots and future-token slots.

    `future_token_slots[rid] = slot` marks a decode whose input token is the previous step's
    sampled token, still unknown on the CPU when this step was planned: the device reads it from
    the FutureMap's `output_tokens_buf[slot]` (0.5.x `resolve_forward_inputs`). These are the
    overlap loop's placeholders. `decoding_req_ids` are the decodes riding a mixed batch
    (SGLang's `decoding_reqs`): their result inserts nothing into the radix tree.
    """

    def __init__(self, step_id: int = -1, forward_mode: str = "idle") -> None:
        super().__init__(step_id)
        self.forward_mode = forward_mode  # "extend", "decode", "mixed" or "idle"
        self.req_pool_indices: dict[str, int] = {}
        self.future_token_slots: dict[str, int] = {}
        self.chunked_req_id: str | None = None
        self.decoding_req_ids: list[str] = []
