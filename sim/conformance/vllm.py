"""`schedsim conformance`: replay scenarios on our vLLM policies with the oracle's fake model.

The step log matches the vLLM oracle (vLLM 0.33.0's own scheduler, docs/policies-vllm.md) line for
line: one JSON line per step with the tokens scheduled, the requests preempted by that step's
schedule() and the requests whose finish the update done during that step reported; with
speculative decoding the draft positions and accepted drafts of the step's batch (`spec`,
`accepted`), with structured output the requests with grammar-bitmask rows and whether the batch's
sampling was deferred (`grammar`, `deferred`). The scenario contract is in `vllm_scenario.py`, the
fake model in `vllm_fake_model.py`; this module plays EngineCore's order around them:

step s: arrivals -> grammars compiled by now -> aborts -> schedule() -> fake output -> the
grammar bitmask unless deferred -> `vllm`: update_from_output(s), then its drafts
(update_draft_token_ids); `vllm-async`: update_from_output(s-1), then for a deferred batch the
previous batch's drafts (update_draft_token_ids_in_output) and the bitmask.
"""

from __future__ import annotations

from typing import Any, cast

from schedsim.conformance.files import Outcome, format_log
from schedsim.conformance.vllm_fake_model import FIRST_GRAMMAR_INVALID, FakeModel
from schedsim.conformance.vllm_scenario import EOS_ID, ScenarioError, validate
from schedsim.policies import Request, StepPlan, StepResult, make_policy
from schedsim.policies.vllm import Scheduler
from schedsim.policies.vllm.structured_output import StructuredOutputManager

__all__ = ["ScenarioError", "replay", "run_scenario", "validate"]


def _requests(scenario: dict) -> tuple[dict[int, list[Request]], dict[int, list[Request]]]:
    """Requests by arrival step, and structured requests by the step their grammar is compiled."""
    arrivals: dict[int, list[Request]] = {}
    compiled: dict[int, list[Request]] = {}
    for idx, r in enumerate(scenario.get("requests", [])):
        delay = r.get("grammar_delay", 0)
        req = Request(
            r["id"],
            float(idx),
            len(r["prompt_token_ids"]),
            r["max_tokens"],
            prompt_token_ids=list(r["prompt_token_ids"]),
            eos_token_id=EOS_ID,
            priority=int(r.get("priority", 0)),
            structured_output=bool(r.get("structured", False)),
            grammar_ready=delay == 0,
        )
        step = r.get("arrival_step", 0)
        arrivals.setdefault(step, []).append(req)
        if delay:
            compiled.setdefault(step + delay, []).append(req)
    return arrivals, compiled


def _grammar_rows(policy: Any, plan: StepPlan) -> list[str]:
    """The requests with bitmask rows in the step's sampling."""
    out = policy.get_grammar_bitmask(plan)
    return [] if out is None else list(out.structured_output_request_ids)


class Replay:
    """One scenario against one policy, in EngineCore's order (module docstring)."""

    def __init__(self, scenario: dict) -> None:
        cfg = validate(scenario)
        try:
            # validate() admits only vllm and vllm-async, both a vLLM Scheduler
            self.policy = cast(Scheduler, make_policy(scenario["policy"], **cfg))
        except ValueError as e:
            raise ScenarioError(f"config rejected: {e}") from e
        self.k = k = cfg["num_spec_tokens"]
        self.policy.structured_output_manager = StructuredOutputManager(
            k, first_rejected_token=FIRST_GRAMMAR_INVALID
        )
        self.depth = self.policy.max_concurrent_batches
        requests = scenario.get("requests", [])
        self.use_structured = any(r.get("structured", False) for r in requests)
        self.model = FakeModel(requests, k, use_async=self.depth > 1)
        self.arrivals, self.compiled = _requests(scenario)
        self.aborts: dict[int, list[str]] = {}
        for a in scenario.get("aborts", []):
            self.aborts.setdefault(a["step"], []).append(a["id"])
        self.inflight: list[tuple[StepPlan, StepResult, dict[str, list[int]]]] = []

    def step(self, step: int) -> dict[str, Any]:
        """Inputs, schedule, the fake output, the update due; the step's log entry."""
        policy = self.policy
        for req in self.arrivals.get(step, ()):
            policy.add_request(req)
        for req in self.compiled.get(step, ()):
            req.grammar_ready = True
        for rid in self.aborts.get(step, ()):
            policy.abort_requests([rid])
        plan = policy.schedule()
        preempted = sorted(plan.preempted_req_ids)
        self.model.drop_proposals(preempted)
        deferred = (
            self.depth > 1 and plan.total_num_scheduled_tokens > 0 and plan.pending_structured_output_tokens
        )
        result, drafts, verified = self.model.output(policy, plan, step)
        rows = _grammar_rows(policy, plan) if self.use_structured and not deferred else None
        self.inflight.append((plan, result, drafts))
        finished: list[str] = []
        if len(self.inflight) >= self.depth:
            finished = self._update(plan, deferred)
            if deferred:
                rows = _grammar_rows(policy, plan)  # after the update: finished requests drop out
        entry: dict[str, Any] = {
            "step": step,
            "scheduled": {rid: plan.num_scheduled_tokens[rid] for rid in sorted(plan.num_scheduled_tokens)},
            "preempted": preempted,
            "finished": sorted(finished),
        }
        if self.k:
            entry["spec"] = {rid: verified[rid][0] for rid in sorted(verified)}
            entry["accepted"] = {rid: verified[rid][1] for rid in sorted(verified)}
        if self.use_structured:
            entry["grammar"] = rows
            entry["deferred"] = deferred
        return entry

    def _update(self, plan: StepPlan, deferred: bool) -> list[str]:
        """update_from_output of the oldest batch, then the drafts proposed after it: sync, to the
        scheduler (EngineCore.post_step); async, into a deferred batch (only after a batch with
        structured requests: the V1 runner copies drafts to the CPU only then)."""
        policy = self.policy
        old_plan, old_result, old_drafts = self.inflight.pop(0)
        finished = [
            out.request_id
            for out in policy.update_from_output(old_plan, old_result)
            if out.finish_reason is not None
        ]
        if self.k and self.depth == 1 and old_plan.total_num_scheduled_tokens > 0:
            policy.update_draft_token_ids(old_drafts)
        if self.k and deferred and old_plan.has_structured_output_requests and old_drafts:
            policy.update_draft_token_ids_in_output(old_drafts, plan)
        return finished


def run_scenario(scenario: dict) -> list[dict]:
    """Replay a scenario; returns one step-log dict per step (EngineCore step / batch-queue order)."""
    engine = Replay(scenario)
    return [engine.step(step) for step in range(scenario["num_steps"])]


def replay(scenario: Any) -> Outcome:
    """The scenario's step log; where vLLM 0.33.0 itself fails (an assertion), status 1 and the
    assertion, as the oracle exits."""
    try:
        return Outcome(format_log(run_scenario(scenario)))
    except AssertionError as exc:
        return Outcome("", 1, f"AssertionError: {exc}")
