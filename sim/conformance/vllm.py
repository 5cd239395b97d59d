"""`schedsim conformance SCENARIO.json`: replay a scenario on our vLLM policies with a fake model.

The step log matches the vLLM oracle (vLLM 0.33.0's own scheduler, docs/policies-vllm.md) line for line: one JSON line
per step with the tokens scheduled, the requests preempted by that step's schedule() and the
requests whose finish the update done during that step reported.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from schedsim.policies import Request, StepPlan, StepResult, make_policy

EOS_ID = 2
VOCAB_SIZE = 50272
MAX_POSITION_EMBEDDINGS = 2048  # the oracle's fake model: vLLM rejects a longer max_model_len
CONFIG_KEYS = (
    "block_size",
    "num_gpu_blocks",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "long_prefill_token_threshold",
    "scheduling_policy",
)
CONFIG_DEFAULTS: dict[str, Any] = {
    "block_size": 16,
    "num_gpu_blocks": 40,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 128,
    "max_model_len": 512,
    "enable_prefix_caching": True,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "scheduling_policy": "fcfs",
}


class ScenarioError(ValueError):
    """A scenario vLLM itself would reject, or one that breaks the format."""


def _check_request(r: dict, idx: int, max_model_len: int, ids: set[str]) -> None:
    """Validate one request entry, naming it."""
    rid = r.get("id")
    where = f"requests[{idx}]"
    if not isinstance(rid, str) or rid in ids:
        raise ScenarioError(f"{where}.id missing or duplicated: {rid!r}")
    ids.add(rid)
    p = r.get("prompt_token_ids")
    if not isinstance(p, list) or not p or not all(isinstance(t, int) and 0 <= t < VOCAB_SIZE for t in p):
        raise ScenarioError(f"{where} ({rid}).prompt_token_ids must be non-empty ints in [0, {VOCAB_SIZE})")
    mt = r.get("max_tokens")
    if not isinstance(mt, int) or mt < 1:
        raise ScenarioError(f"{where} ({rid}).max_tokens must be an int >= 1")
    if len(p) + mt > max_model_len:
        raise ScenarioError(
            f"{where} ({rid}): prompt ({len(p)}) + max_tokens ({mt}) > max_model_len ({max_model_len})"
        )
    st = r.get("arrival_step", 0)
    if not isinstance(st, int) or st < 0:
        raise ScenarioError(f"{where} ({rid}).arrival_step must be an int >= 0")
    ea = r.get("eos_after")
    if ea is not None and (not isinstance(ea, int) or ea < 1):
        raise ScenarioError(f"{where} ({rid}).eos_after must be null or an int >= 1")
    if not isinstance(r.get("priority", 0), int):
        raise ScenarioError(f"{where} ({rid}).priority must be an int")


def validate(sc: dict) -> dict[str, Any]:
    """The oracle's contract plus vLLM's own config checks; returns the full config."""
    if sc.get("policy") not in ("vllm", "vllm-async"):
        raise ScenarioError(f"policy must be 'vllm' or 'vllm-async': {sc.get('policy')!r}")
    unknown = set(sc.get("config", {})) - set(CONFIG_KEYS)
    if unknown:
        raise ScenarioError(f"config: unknown keys {sorted(unknown)}")
    cfg = dict(CONFIG_DEFAULTS, **sc.get("config", {}))
    if cfg["scheduling_policy"] not in ("fcfs", "priority"):
        raise ScenarioError("config.scheduling_policy must be 'fcfs' or 'priority'")
    if isinstance(cfg["max_model_len"], int) and cfg["max_model_len"] > MAX_POSITION_EMBEDDINGS:
        raise ScenarioError(
            f"config.max_model_len {cfg['max_model_len']} > the model's "
            f"max_position_embeddings {MAX_POSITION_EMBEDDINGS}"
        )
    num_steps = sc.get("num_steps")
    if not isinstance(num_steps, int) or num_steps < 0:
        raise ScenarioError("num_steps must be a non-negative int")
    ids: set[str] = set()
    for idx, r in enumerate(sc.get("requests", [])):
        _check_request(r, idx, cfg["max_model_len"], ids)
    for idx, a in enumerate(sc.get("aborts", [])):
        if a.get("id") not in ids or not isinstance(a.get("step"), int):
            raise ScenarioError(f"aborts[{idx}]: unknown id or non-int step: {a!r}")
    return cfg


def _fake_output(policy: Any, plan: StepPlan, step: int, eos_after: dict[str, int | None]) -> StepResult:
    """One token per sampling request: EOS at its eos_after-th output, else 100 + step % 50."""
    sampled: dict[str, list[int]] = {}
    for rid in plan.num_scheduled_tokens:
        req = policy.requests[rid]
        if req.is_prefill_chunk:
            sampled[rid] = []
            continue
        k = req.num_computed_tokens - req.prompt_len + 1
        sampled[rid] = [EOS_ID if eos_after[rid] == k else 100 + step % 50]
    return StepResult(step_id=plan.step_id, sampled_token_ids=sampled)


def run_scenario(scenario: dict) -> list[dict]:
    """Replay a scenario; returns one step-log dict per step (EngineCore step / batch-queue order)."""
    cfg = validate(scenario)
    try:
        policy = make_policy(scenario["policy"], **cfg)
    except ValueError as e:
        raise ScenarioError(f"config rejected: {e}") from e
    arrivals: dict[int, list[Request]] = {}
    eos_after: dict[str, int | None] = {}
    for idx, r in enumerate(scenario.get("requests", [])):
        req = Request(
            r["id"],
            float(idx),
            len(r["prompt_token_ids"]),
            r["max_tokens"],
            prompt_token_ids=list(r["prompt_token_ids"]),
            eos_token_id=EOS_ID,
            priority=int(r.get("priority", 0)),
        )
        arrivals.setdefault(r.get("arrival_step", 0), []).append(req)
        eos_after[r["id"]] = r.get("eos_after")
    aborts: dict[int, list[str]] = {}
    for a in scenario.get("aborts", []):
        aborts.setdefault(a["step"], []).append(a["id"])
    depth = policy.max_concurrent_batches
    inflight: list[tuple[StepPlan, StepResult]] = []
    log: list[dict] = []
    for step in range(scenario["num_steps"]):
        for req in arrivals.get(step, ()):
            policy.add_request(req)
        for rid in aborts.get(step, ()):
            policy.abort_requests([rid])
        plan = policy.schedule()
        inflight.append((plan, _fake_output(policy, plan, step, eos_after)))
        finished: list[str] = []
        if len(inflight) >= depth:
            old_plan, old_result = inflight.pop(0)
            for out in policy.update_from_output(old_plan, old_result):
                if out.finish_reason is not None:
                    finished.append(out.request_id)
        log.append(
            {
                "step": step,
                "scheduled": {k: plan.num_scheduled_tokens[k] for k in sorted(plan.num_scheduled_tokens)},
                "preempted": sorted(plan.preempted_req_ids),
                "finished": sorted(finished),
            }
        )
    return log


def format_log(log: list[dict]) -> str:
    """JSON lines exactly as the oracle prints them."""
    return "".join(json.dumps(line) + "\n" for line in log)


def _run_file(path: str) -> int:
    """Print one scenario's step log; 2 (with the reason on stderr) if it is invalid."""
    try:
        with open(path) as f:
            scenario = json.load(f)
        log = run_scenario(scenario)
    except (OSError, json.JSONDecodeError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 2
    except ScenarioError as e:
        print(f"invalid scenario {path}: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(format_log(log))
    return 0


def main(paths: list[str]) -> int:
    """Print each scenario's step log; exit 2 on an invalid one."""
    return max(_run_file(p) for p in paths)
