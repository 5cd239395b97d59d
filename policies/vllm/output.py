"""update_from_output of the vLLM policies: settle a finished step's tokens, drafts and stops."""

from __future__ import annotations

from mypy_extensions import trait

from ..plan import RequestOutput, StepPlan, StepResult
from ..request import Request, RequestStatus
from .state import VllmState


def check_stop(request: Request, max_model_len: int) -> bool:
    """vLLM's check_stop on the last appended token: EOS, stop tokens, then length caps."""
    last = request.output_token_ids[-1]
    if not request.ignore_eos and last == request.eos_token_id:
        request.status = RequestStatus.FINISHED_STOPPED
        return True
    if last in request.stop_token_ids:
        request.status = RequestStatus.FINISHED_STOPPED
        request.stop_reason = last
        return True
    if request.num_tokens >= max_model_len or len(request.output_token_ids) >= request.max_tokens:
        request.status = RequestStatus.FINISHED_LENGTH_CAPPED
        return True
    return False


@trait
class OutputMixin(VllmState):
    """Folds a StepResult back into the requests (vLLM's Scheduler.update_from_output)."""

    def update_from_output(self, plan: StepPlan, result: StepResult) -> list[RequestOutput]:
        """Apply the result of `plan`; stale output of preempted requests is delivered, not counted."""
        if self.config.defer_block_free and plan.total_num_scheduled_tokens > 0:
            self.kv.end_step()
        requests = self.requests
        sampled = result.sampled_token_ids
        spec_tokens = plan.spec_decode_tokens
        cache_spec = self.num_spec_tokens > 0
        running_status = RequestStatus.RUNNING
        max_model_len = self.config.max_model_len
        caching = self.kv.enable_caching
        block_size = self.kv.block_size
        num_cached = self.kv.num_cached_block
        outputs: list[RequestOutput] = []
        stopped_running: set[Request] = set()
        stopped_waiting: set[Request] = set()
        failed = result.failed_kv_load_ids
        for rid, n in plan.num_scheduled_tokens.items():
            request = requests.get(rid)
            if request is None:
                continue  # finished (aborted) while the step was in flight
            request.num_in_flight_tokens -= n
            stale_n = request.num_stale_output_tokens
            stale = stale_n > 0
            if stale:
                request.num_stale_output_tokens = stale_n - n
                assert stale_n >= n
            if failed and rid in failed:
                self._recompute_after_failed_load(request, stale)
                continue
            generated = sampled.get(rid)
            if not generated:
                continue  # a prefill chunk: nothing to deliver
            if spec_tokens and not stale:
                spec = spec_tokens.get(rid)
                if spec:
                    self._roll_back_rejected(request, len(spec) - max(len(generated) - 1, 0))
            status_before = request.status
            placeholders = request.num_output_placeholders
            had_placeholders = placeholders > 0
            if not stale and len(generated) == 1:
                # Common case: one token, no trimming possible.
                tok = generated[0]
                outs = request.output_token_ids
                outs.append(tok)
                num_out = len(outs)
                stopped = ((tok == request.eos_token_id and not request.ignore_eos)
                           or num_out >= request.max_tokens
                           or request.prompt_len + num_out >= max_model_len
                           or (request.stop_token_ids and tok in request.stop_token_ids))
                if stopped:
                    check_stop(request, max_model_len)
                if had_placeholders:
                    request.num_output_placeholders = placeholders - 1
                new_ids = [tok]
            else:
                new_ids, stopped = self._append_outputs(request, list(generated), stale)
            if not stale and status_before == running_status and (had_placeholders or cache_spec):
                done = request.num_computed_tokens - request.num_in_flight_tokens
                if caching and done // block_size > num_cached.get(rid, 0):
                    self.kv.cache_blocks(request, done)
            if stopped:
                outputs.append(RequestOutput(rid, new_ids, request.status, stale))
                self._free_request(request)
                (stopped_running if status_before == running_status else stopped_waiting).add(request)
            else:
                outputs.append(RequestOutput(rid, new_ids, None, stale))
        if stopped_running:
            self.running = [r for r in self.running if r not in stopped_running]
        if stopped_waiting:
            self.waiting.remove_many(stopped_waiting)
        return outputs

    def _recompute_after_failed_load(self, request: Request, stale: bool) -> None:
        """KV load failure, recompute policy: drop the step's output and recompute from token 0.

        The request keeps its blocks; outputs of its other in-flight steps become stale (as after
        a preemption) so they are delivered without touching the reset counters.
        """
        if stale or request.status != RequestStatus.RUNNING:
            return
        rid = request.request_id
        self.recompute_frontier[rid] = max(request.num_computed_tokens - request.num_in_flight_tokens,
                                           self.recompute_frontier.get(rid, 0))
        request.num_computed_tokens = 0
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0
        request.spec_token_ids = []
        request.is_prefill_chunk = True

    @staticmethod
    def _roll_back_rejected(request: Request, rejected: int) -> None:
        """Rejected drafts: their KV positions and (async) placeholders are given back."""
        if request.num_computed_tokens > 0:
            request.num_computed_tokens -= rejected
        if request.num_output_placeholders > 0:
            request.num_output_placeholders -= rejected

    def _append_outputs(self, request: Request, new_ids: list[int], stale: bool) -> tuple[list[int], bool]:
        """Append tokens one by one, stopping (and trimming) at the first stop condition."""
        num_returned = len(new_ids)
        outs = request.output_token_ids
        max_model_len = self.config.max_model_len
        stopped = False
        eos = None if request.ignore_eos else request.eos_token_id
        stops = request.stop_token_ids
        limit = min(request.max_tokens, max_model_len - request.prompt_len)
        for i, tok in enumerate(new_ids, 1):
            outs.append(tok)
            if (tok == eos or len(outs) >= limit or (stops and tok in stops)) and check_stop(
                    request, max_model_len):
                stopped = True
                trimmed = num_returned - i
                if not stale:
                    request.num_computed_tokens -= trimmed
                request.num_truncated_tokens += trimmed
                del new_ids[i:]
                break
        if not stale and request.num_output_placeholders > 0:
            request.num_output_placeholders -= num_returned
            assert request.num_output_placeholders >= 0, f"{request.request_id}: placeholders < 0"
        return new_ids, stopped
