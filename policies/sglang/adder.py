"""SGLang's PrefillAdder: which waiting requests join the next prefill (extend) batch.

Budgets, in tokens (0.5.23 `schedule_policy.py`, `mem_cache/prefill_budget.py`):
- rem_input_tokens = max_prefill_tokens, rem_chunk_tokens = chunked_prefill_size (None: off),
  both less the mixed-in decodes; each admitted extend is charged page-ceiled;
- KV, read live: free tokens + the tree's evictable tokens - `total_offset`, where total_offset
  starts at the running requests' expected future decode tokens, min(max_new - out, clip) *
  new_token_ratio (ratio 1 for ignore_eos), and grows by each admission's page-ceiled extend +
  one page + its clipped max_new; a new request needs extend + max_new + page < remaining_total,
  checked with its matched prefix locked (so the prefix no longer counts as evictable); an
  admitted request keeps its prefix locked;
- without chunking the first request may exceed rem_input_tokens, a later one stops the pass
  when its page-ceiled extend is >= what is left; with chunking max_prefill_tokens never cuts an
  extend, it only ends the pass once spent;
- one chunked request at a time: an extend above rem_chunk_tokens is cut to a page-aligned end
  and becomes the chunked request (reserving no decode tokens until its last chunk).
"""

from __future__ import annotations

from enum import Enum

from ..request import Request
from .config import SGLangConfig
from .mem_cache import MemCache


class AddReqResult(Enum):
    """SGLang's verdicts: keep adding, out of KV (batch is full), or out of some other budget."""

    CONTINUE = 0
    NO_TOKEN = 1
    OTHER = 2


class Admission:
    """One request's shape in the batch: prefix it starts from, extend length, chunked or not."""

    def __init__(self, request: Request, prefix_len: int, extend_len: int, is_chunked: bool) -> None:
        self.request = request
        self.prefix_len = prefix_len
        self.extend_len = extend_len
        self.is_chunked = is_chunked


class PrefillAdder:
    """Budget accounting for one prefill pass; the batch is allocated by the caller afterwards."""

    def __init__(
        self,
        config: SGLangConfig,
        mem: MemCache,
        running: list[Request],
        new_token_ratio: float,
        num_mixed_decode_tokens: int,
        max_new: dict[str, int],
    ) -> None:
        self.page = mem.page_size  # (the config's is a property: a Python call, compiled)
        self.clip = config.clip_max_new_tokens
        self.max_new = max_new
        self.mem = mem
        self.rem_input_tokens = config.max_prefill_tokens - num_mixed_decode_tokens
        self.rem_chunk_tokens = (
            None
            if config.chunked_prefill_size is None
            else config.chunked_prefill_size - num_mixed_decode_tokens
        )
        self.current_offset = num_mixed_decode_tokens
        total, clip = float(num_mixed_decode_tokens), self.clip
        for req in running:  # (the same additions in the same order, into a local)
            ratio = 1.0 if req.ignore_eos else new_token_ratio
            total += min(max_new[req.request_id] - len(req.output_token_ids), clip) * ratio
        self.total_offset = total
        self.can_run: list[Admission] = []
        self.new_chunked: Admission | None = None

    # ---- budgets ----
    def ceil_paged(self, tokens: int) -> int:
        """Round up to whole pages."""
        return -(-tokens // self.page) * self.page

    def available_and_evictable(self) -> int:
        """Free plus evictable tokens, now."""
        return self.mem.available_size() + self.mem.evictable_size()

    @property
    def rem_total_tokens(self) -> float:
        """KV tokens left after the running requests' expected decodes and this pass's admissions."""
        return self.available_and_evictable() - self.total_offset

    def budget_state(self) -> AddReqResult:
        """Whether another request could still join."""
        avail = self.available_and_evictable()
        if not (avail - self.total_offset > 0 and avail - self.current_offset > 0):
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0:
            return AddReqResult.OTHER
        if self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0:
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    def _charge(self, extend_len: int, max_new_tokens: int) -> None:
        """Reserve one admission against KV and compute budgets (`_update_prefill_budget`)."""
        paged = self.ceil_paged(extend_len)
        immediate = paged + self.page
        self.total_offset += immediate + max_new_tokens
        self.current_offset += immediate
        self.rem_input_tokens -= paged
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= paged

    # ---- admissions ----
    def add_chunked_req(self, req: Request, prefix_len: int) -> bool:
        """Continue the chunked request first; True if it is still unfinished after this step."""
        rem = self.rem_chunk_tokens if self.rem_chunk_tokens is not None else self.rem_input_tokens
        avail = min(rem, int(self.rem_total_tokens))
        rem = avail if avail > 0 else rem  # a continuation must progress to release its KV
        extend = req.num_tokens - prefix_len
        truncated = extend > rem
        new_len = min(extend, rem)
        if new_len <= 0:  # mixed-in decodes used up the whole chunk budget: no chunk this step
            return True
        self.can_run.append(Admission(req, prefix_len, new_len, truncated))
        self._charge(new_len, 0 if truncated else min(self.max_new[req.request_id], self.clip))
        return truncated

    def add_one_req(self, req: Request, prefix_len: int) -> AddReqResult:
        """Admit a waiting request whole or as the new chunked request, or say why not; the
        caller has matched it (`prefix_len`, its last node in `mem`)."""
        extend = req.num_tokens - prefix_len
        mem = self.mem
        mem.lock_prefix(req)  # the selection sees the prefix locked; kept if admitted
        verdict = self._select(req, prefix_len, extend, self._total_tokens(req, prefix_len))
        if isinstance(verdict, AddReqResult):
            mem.release_lock(req)
            return verdict
        self.can_run.append(verdict)
        if verdict.is_chunked:
            self.new_chunked = verdict
        reserved = 0 if verdict.is_chunked else min(self.max_new[req.request_id], self.clip)
        self._charge(verdict.extend_len, reserved)
        return self.budget_state()

    def _total_tokens(self, req: Request, prefix_len: int) -> int:
        """KV a request asks for: its extend, its remaining (clipped) output and one page."""
        remaining_new = min(max(self.max_new[req.request_id] - req.num_output_tokens, 0), self.clip)
        return req.num_tokens - prefix_len + remaining_new + self.page

    def refuses_for_kv(self, req: Request, prefix_len: int, locked: int) -> bool:
        """Whether `add_one_req` would say NO_TOKEN at once: `_select`'s first test, with the
        `locked` tokens its prefix lock takes from the evictable (`peek_kv_cache`)."""
        remaining = (self.available_and_evictable() - locked) - self.total_offset
        return not self._total_tokens(req, prefix_len) < remaining

    def _select(
        self, req: Request, prefix_len: int, extend: int, total_tokens: int
    ) -> Admission | AddReqResult:
        """The request's shape in this batch (`_select_prefill_admission`), or why it cannot join."""
        if not total_tokens < self.rem_total_tokens:
            return AddReqResult.NO_TOKEN
        input_tokens = self.ceil_paged(extend)
        if self.rem_chunk_tokens is None and self.can_run and input_tokens >= self.rem_input_tokens:
            return AddReqResult.OTHER
        if self.rem_chunk_tokens is not None and input_tokens > self.rem_chunk_tokens:
            cut = self.rem_chunk_tokens // self.page * self.page
            extend_len = (prefix_len + cut) // self.page * self.page - prefix_len
            if extend_len <= 0:
                return AddReqResult.OTHER
            return Admission(req, prefix_len, extend_len, True)
        return Admission(req, prefix_len, extend, False)
