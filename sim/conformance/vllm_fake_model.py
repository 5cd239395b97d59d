"""The fake model of the vLLM conformance contract (docs/policies-vllm.md): which tokens a step samples, which
drafts the fake drafter proposes after it and how many of them the fake verifier accepts.

- A scheduled request that leaves known tokens uncomputed (a prefill chunk) samples nothing.
- A request that samples verifies its d scheduled draft positions (padding and async placeholders
  included) if d >= 1: the i-th verification accepts min(accept[i % len], v), v the drafts it can
  verify: sync, the leading scheduled drafts that are not -1; async, the leading drafts of its
  proposal after the batch right before (if it sampled there; else none), up to the first one its
  grammar rejects. It emits the accepted drafts, then `100 + step % 50`; its output number
  `eos_after` (1-based, over every token emitted so far) is EOS instead.
- After sampling, it proposes k drafts `100 + (step + 1 + j) % 50`; a structured request's p-th
  proposal has only its first valid_drafts[p % len] grammar-valid, the rest are
  `FIRST_GRAMMAR_INVALID + j`, the ids the fake grammar rejects.
"""

from __future__ import annotations

from typing import Any

from schedsim.conformance.vllm_scenario import EOS_ID
from schedsim.policies import StepPlan, StepResult

FIRST_GRAMMAR_INVALID = 50000  # the fake grammar (regex a*) rejects ids from here on


def _cycle(values: list[int], i: int) -> int:
    """values[i], cycling."""
    return values[i % len(values)]


class FakeModel:
    """Per-request counters of emitted tokens, verifications and proposals, and the latest
    proposal (the drafts the worker holds for the request's next step)."""

    def __init__(self, requests: list[dict], num_spec_tokens: int, use_async: bool) -> None:
        self.by_id = {r["id"]: r for r in requests}
        self.k = num_spec_tokens
        self.use_async = use_async
        self.emitted: dict[str, int] = {}
        self.num_verified: dict[str, int] = {}
        self.num_proposed: dict[str, int] = {}
        self.proposal: dict[str, tuple[int, list[int]]] = {}  # id -> (step proposed after, drafts)

    def drop_proposals(self, request_ids: list[str]) -> None:
        """The worker drops a preempted request's drafts."""
        for rid in request_ids:
            self.proposal.pop(rid, None)

    def output(
        self, policy: Any, plan: StepPlan, step: int
    ) -> tuple[StepResult, dict[str, list[int]], dict[str, tuple[int, int]]]:
        """The step's sampled tokens, the drafts proposed after it (empty for prefill chunks) and,
        per verifying request, (spec positions d, drafts accepted a)."""
        sampled: dict[str, list[int]] = {}
        drafts: dict[str, list[int]] = {}
        verified_log: dict[str, tuple[int, int]] = {}
        spec = plan.spec_decode_tokens
        for rid in plan.num_scheduled_tokens:
            if policy.requests[rid].is_prefill_chunk:
                sampled[rid] = []
                drafts[rid] = []
                continue
            scheduled = spec.get(rid, []) if spec else []
            accepted: list[int] = []
            if scheduled:
                verifiable = self._verifiable(rid, scheduled, step)
                i = self.num_verified.get(rid, 0)
                self.num_verified[rid] = i + 1
                a = min(_cycle(self.by_id[rid].get("accept", [self.k]), i), len(verifiable))
                accepted = verifiable[:a]
                verified_log[rid] = (len(scheduled), a)
            sampled[rid] = self._emit(rid, accepted + [100 + step % 50])
            if self.k:
                drafts[rid] = self._propose(rid, step)
        return StepResult(step_id=plan.step_id, sampled_token_ids=sampled), drafts, verified_log

    def _verifiable(self, rid: str, scheduled: list[int], step: int) -> list[int]:
        """The drafts the verifier can accept, in order."""
        if not self.use_async:
            out: list[int] = []
            for t in scheduled:
                if t < 0:
                    break
                out.append(t)
            return out
        prop = self.proposal.get(rid)
        if prop is None or prop[0] != step - 1:
            return []  # only placeholders: a padded admission, or it skipped the batch before
        out = []
        for t in prop[1][: len(scheduled)]:
            if t >= FIRST_GRAMMAR_INVALID:
                break
            out.append(t)
        return out

    def _emit(self, rid: str, tokens: list[int]) -> list[int]:
        """The tokens with EOS at the request's eos_after-th output."""
        first = self.emitted.get(rid, 0) + 1
        eos_after = self.by_id[rid].get("eos_after")
        if eos_after is not None and first <= eos_after < first + len(tokens):
            tokens[eos_after - first] = EOS_ID
        self.emitted[rid] = first - 1 + len(tokens)
        return tokens

    def _propose(self, rid: str, step: int) -> list[int]:
        """k drafts after this step; a structured request's grammar may reject the tail."""
        r = self.by_id[rid]
        p = self.num_proposed.get(rid, 0)
        self.num_proposed[rid] = p + 1
        k = self.k
        valid = _cycle(r.get("valid_drafts", [k]), p) if r.get("structured", False) else k
        drafts = [100 + (step + 1 + j) % 50 if j < valid else FIRST_GRAMMAR_INVALID + j for j in range(k)]
        self.proposal[rid] = (step, drafts)
        return drafts
