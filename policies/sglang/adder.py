"""SGLang's PrefillAdder: which waiting requests join the next prefill (extend) batch.

Budgets, in tokens (schedule_policy.py / mem_cache/prefill_budget.py, 0.5.x):
- rem_input_tokens = max_prefill_tokens, rem_chunk_tokens = chunked_prefill_size (None: off),
  both less the mixed-in decodes; each admitted extend is charged page-ceiled;
- KV: free (+ evictable cached) tokens minus `total_offset`, where total_offset starts at the
  running requests' expected future decode tokens, min(max_new - out, clip) * new_token_ratio
  (ratio 1 for ignore_eos), and grows by each admission's page-ceiled extend + one page + its
  clipped max_new; a new request needs extend + max_new + page < remaining_total;
- one chunked request at a time: an extend that does not fit rem_chunk_tokens is cut to a page
  multiple and becomes the chunked request (reserving no decode tokens yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ..request import Request
from .config import SGLangConfig


class AddReqResult(Enum):
    """SGLang's verdicts: keep adding, out of KV (batch is full), or out of some other budget."""

    CONTINUE = 0
    NO_TOKEN = 1
    OTHER = 2


@dataclass
class Admission:
    """One request's shape in the batch: cached prefix, extend length, chunked or not."""

    request: Request
    prefix_len: int
    extend_len: int
    is_chunked: bool
    hit_blocks: list[int] = field(default_factory=list)


class PrefillAdder:
    """Budget accounting for one prefill pass; allocation is done by the caller."""

    def __init__(
        self,
        config: SGLangConfig,
        available_tokens: int,
        running: list[Request],
        new_token_ratio: float,
        num_mixed_decode_tokens: int,
        max_new: dict[str, int],
    ) -> None:
        self.page = config.page_size
        self.clip = config.clip_max_new_tokens
        self.max_new = max_new
        self.available = available_tokens
        self.rem_input_tokens = max(config.max_prefill_tokens, config.max_model_len) - num_mixed_decode_tokens
        self.rem_chunk_tokens = (
            None
            if config.chunked_prefill_size is None
            else config.chunked_prefill_size - num_mixed_decode_tokens
        )
        self.total_offset = float(num_mixed_decode_tokens)
        self.current_offset = num_mixed_decode_tokens
        for req in running:
            ratio = 1.0 if req.ignore_eos else new_token_ratio
            self.total_offset += min(self.max_new[req.request_id] - req.num_output_tokens, self.clip) * ratio
        self.can_run: list[Admission] = []
        self.new_chunked: Admission | None = None

    # ---- budgets ----
    def ceil_paged(self, tokens: int) -> int:
        """Round up to whole pages."""
        return -(-tokens // self.page) * self.page

    @property
    def rem_total_tokens(self) -> float:
        """KV tokens left after the running requests' expected decodes and this pass's admissions."""
        return self.available - self.total_offset

    def budget_state(self) -> AddReqResult:
        """Whether another request could still join."""
        if not (self.rem_total_tokens > 0 and self.available - self.current_offset > 0):
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0:
            return AddReqResult.OTHER
        if self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0:
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    def _charge(self, extend_len: int, max_new_tokens: int) -> None:
        """Reserve one admission against KV and compute budgets."""
        paged = self.ceil_paged(extend_len)
        immediate = paged + self.page
        self.total_offset += immediate + max_new_tokens
        self.current_offset += immediate
        self.rem_input_tokens -= paged
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= paged

    def _remaining_new(self, req: Request) -> int:
        """Decode tokens the request may still produce, clipped for the estimate."""
        return min(max(self.max_new[req.request_id] - req.num_output_tokens, 0), self.clip)

    # ---- admissions ----
    def add_chunked_req(self, req: Request) -> bool:
        """Continue the chunked request first; True if it is still unfinished after this step."""
        rem = self.rem_chunk_tokens if self.rem_chunk_tokens is not None else self.rem_input_tokens
        avail = min(rem, int(self.rem_total_tokens))
        rem = avail if avail > 0 else rem
        extend = req.num_tokens - req.num_computed_tokens
        truncated = extend > rem
        new_len = min(extend, rem)
        if new_len <= 0:  # mixed-in decodes used up the whole chunk budget: no chunk this step
            return True
        self.can_run.append(Admission(req, req.num_computed_tokens, new_len, truncated))
        self._charge(new_len, 0 if truncated else min(self.max_new[req.request_id], self.clip))
        return truncated

    def add_one_req(self, req: Request, prefix_len: int, hit_blocks: list[int]) -> AddReqResult:
        """Admit a waiting request whole or as the new chunked request, or say why not."""
        max_new = self._remaining_new(req)
        extend = req.num_tokens - prefix_len
        if not extend + max_new + self.page < self.rem_total_tokens:
            return AddReqResult.NO_TOKEN
        paged = self.ceil_paged(extend)
        if self.rem_chunk_tokens is None and self.can_run and paged >= self.rem_input_tokens:
            return AddReqResult.OTHER
        is_chunked = False
        budget_max_new = min(self.max_new[req.request_id], self.clip)
        if self.rem_chunk_tokens is not None and paged > self.rem_chunk_tokens:
            cut = self.rem_chunk_tokens // self.page * self.page
            extend = (prefix_len + cut) // self.page * self.page - prefix_len
            if extend <= 0:
                return AddReqResult.OTHER
            is_chunked = True
            budget_max_new = 0
        adm = Admission(req, prefix_len, extend, is_chunked, hit_blocks)
        self.can_run.append(adm)
        if is_chunked:
            self.new_chunked = adm
        self._charge(extend, budget_max_new)
        return self.budget_state()

    def pop_last(self) -> None:
        """Undo the last admission's list entry when its KV allocation failed (budgets stay spent)."""
        adm = self.can_run.pop()
        if self.new_chunked is adm:
            self.new_chunked = None
