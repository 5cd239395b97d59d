"""A small test-only policy serving either side of a prefill/decode pair (`pd-fcfs`), registered
only while a test module that uses it runs (`registered()`): other tests run every registered
policy, on backends this one does not serve.

FCFS, no preemption: a request reserves the blocks of its prompt and outputs when admitted.
Prefill side (`do_remote_decode`): after its length-capped first token the request finishes, its
blocks stay held and the next plan lists it in `kv_reqs_to_send`; `finished_sending` frees them.
Decode side (`do_remote_prefill`): on admission the request reserves its blocks and parks until
the load ends (the plan lists it in `kv_reqs_to_recv`: its prompt tokens); `finished_recving`
makes it runnable with the prompt but its last token computed (that one is recomputed to sample,
as vLLM does), a failed load makes it recompute the whole prompt locally.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from schedsim.policies import (
    Request,
    RequestOutput,
    RequestRejected,
    RequestStatus,
    SchedulerConfig,
    StepPlan,
    StepResult,
)
from schedsim.policies.registry import REGISTRY, PolicyInfo

NAME = "pd-fcfs"


class PDFcfs:
    """The mechanism's test policy (see the module docstring)."""

    max_concurrent_batches = 1

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.free = config.num_gpu_blocks - 1
        self.requests: dict[str, Request] = {}
        self.blocks: dict[str, int] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.loading: dict[str, Request] = {}
        self.sending: dict[str, int] = {}  # request id -> blocks held for the decode side
        self.to_send: dict[str, int] = {}
        self.notify: dict[str, int] = {}  # decode side: 0-token recvs of requests dropped unloaded
        self.finished_ids: list[str] = []
        self.step_id = 0

    def _need(self, req: Request) -> int:
        return -(-(req.prompt_len + req.max_tokens) // self.config.block_size)

    def add_request(self, request: Request) -> None:
        if self._need(request) > self.config.num_gpu_blocks - 1:
            raise RequestRejected(f"request {request.request_id} needs more blocks than the pool")
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def abort_requests(self, request_ids: Iterable[str]) -> list[Request]:
        out = []
        for rid in request_ids:
            req = self.requests.pop(rid, None)
            if req is None:
                continue
            if req in self.waiting:
                self.waiting.remove(req)
            if req in self.running:
                self.running.remove(req)
            params = req.kv_transfer_params
            loaded = self.loading.pop(rid, None) is not None or req.num_computed_tokens > 0
            if params is not None and params.do_remote_prefill and not loaded:
                self.notify[rid] = 0  # never loaded: tell the prefill side to free its blocks
            self.free += self.blocks.pop(rid, 0)
            req.status = RequestStatus.FINISHED_ABORTED
            self.finished_ids.append(rid)
            out.append(req)
        return out

    def has_requests(self) -> bool:
        return bool(
            self.waiting or self.running or self.loading or self.finished_ids or self.to_send or self.notify
        )

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running or self.loading)

    def has_kv_transfers_in_flight(self) -> bool:
        return bool(self.loading or self.sending)

    def decode_takes_prefill_token(self) -> bool:
        return False

    def schedule(self) -> StepPlan:
        plan = StepPlan(step_id=self.step_id)
        self.step_id += 1
        budget = self.config.max_num_batched_tokens
        for req in self.running:
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if n <= 0:
                continue
            self._put(plan, req, n)
            budget -= n
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            params = req.kv_transfer_params
            remote = params is not None and params.do_remote_prefill and req.status == RequestStatus.WAITING
            if req.request_id not in self.blocks:
                if self._need(req) > self.free:
                    break
                self.free -= self._need(req)
                self.blocks[req.request_id] = self._need(req)
                if remote and req.num_computed_tokens == 0 and not req.num_output_tokens:
                    self.waiting.popleft()
                    req.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                    self.loading[req.request_id] = req
                    plan.kv_reqs_to_recv[req.request_id] = req.prompt_len
                    continue
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if n <= 0:
                break
            self.waiting.popleft()
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            plan.new_req_ids.append(req.request_id)
            self._put(plan, req, n)
            budget -= n
        plan.kv_reqs_to_recv.update(self.notify)
        self.notify = {}
        plan.kv_reqs_to_send, self.to_send = self.to_send, {}
        plan.finished_req_ids, self.finished_ids = self.finished_ids, []
        return plan

    def _put(self, plan: StepPlan, req: Request, n: int) -> None:
        plan.num_scheduled_tokens[req.request_id] = n
        plan.context_lens[req.request_id] = req.num_computed_tokens
        plan.total_num_scheduled_tokens += n

    def update_from_output(self, plan: StepPlan, result: StepResult) -> list[RequestOutput]:
        for rid in sorted(result.finished_sending):
            self.free += self.sending.pop(rid)
        for rid in sorted(result.finished_recving | result.failed_kv_load_ids):
            req = self.loading.pop(rid, None)
            if req is None:  # aborted meanwhile
                continue
            # loaded: only the last prompt token is computed again; failed: the whole prompt
            req.num_computed_tokens = req.prompt_len - 1 if rid in result.finished_recving else 0
            req.status = RequestStatus.WAITING
            self.waiting.appendleft(req)
        outputs = []
        for rid, n in plan.num_scheduled_tokens.items():
            req = self.requests.get(rid)
            if req is None or req.is_finished:
                continue
            req.num_computed_tokens += n
            toks = result.sampled_token_ids.get(rid, [])
            finish = None
            if toks:
                req.output_token_ids.extend(toks)
                if req.eos_token_id is not None and toks[-1] == req.eos_token_id and not req.ignore_eos:
                    finish = RequestStatus.FINISHED_STOPPED
                elif req.num_output_tokens >= req.max_tokens:
                    finish = RequestStatus.FINISHED_LENGTH_CAPPED
            if finish is not None:
                req.status = finish
                self.running.remove(req)
                del self.requests[rid]
                held = self.blocks.pop(rid)
                params = req.kv_transfer_params
                capped = finish == RequestStatus.FINISHED_LENGTH_CAPPED
                if params is not None and params.do_remote_decode and capped:
                    self.sending[rid] = held
                    self.to_send[rid] = req.num_computed_tokens
                else:
                    self.free += held
                self.finished_ids.append(rid)
            outputs.append(RequestOutput(rid, list(toks), finish))
        return outputs

    def update_draft_token_ids(self, drafts: Mapping[str, list[int]]) -> None:
        pass

    def get_request_counts(self) -> tuple[int, int]:
        return len(self.running), len(self.waiting) + len(self.loading)

    def kv_usage(self) -> float:
        return 1.0 - self.free / (self.config.num_gpu_blocks - 1)

    def check_invariants(self) -> None:
        held = sum(self.blocks.values()) + sum(self.sending.values())
        assert held + self.free == self.config.num_gpu_blocks - 1, (held, self.free)


@contextmanager
def registered() -> Iterator[None]:
    """`pd-fcfs` in the policy registry for the duration."""
    REGISTRY.add(
        PolicyInfo(NAME, "test only: FCFS on either side of a prefill/decode pair", SchedulerConfig, PDFcfs)
    )
    try:
        yield
    finally:
        REGISTRY.infos.pop(NAME, None)
