"""`schedsim conformance` for SGLang scenarios: replay one on `sglang-overlap` with a fake model.

Scenario: `{"name", "config": {"pool_tokens", "max_running", "chunked_prefill_size" (null: off),
"max_prefill_tokens", "schedule_policy": "fcfs"|"lpm", "max_model_len", "enable_prefix_caching",
"page_size" (optional, default 1)}, "requests": [{"id", "prompt": [token ids], "max_new_tokens",
"arrival": iteration}]}`, SGLang's default new-token-ratio settings.

The log has one JSON line per iteration of SGLang's overlap loop (schedule the next batch, then
process the previous batch's result): `{"step", "mode": "extend"|"decode"|"idle", "extend":
[[id, prefix_len, extend_len], ...] (extending), "decode": [ids] (decoding), "retracted": [ids]
(when any), "finished": [ids whose finish this iteration processed] (when any)}`. Requests
arriving at an iteration are added (in list order) before it schedules. The k-th output token of
the request at index i is `100000 + 1000*i + k` (no EOS). The run ends at the first iteration
where everything has arrived, every request has finished and nothing is in flight; that
iteration is not logged.
"""

from __future__ import annotations

from typing import Any

from schedsim.conformance.files import Outcome, ScenarioError, format_log, int_field, request_id, token_ids
from schedsim.policies import Request, StepPlan, StepResult, make_policy
from schedsim.policies.sglang import SGLangOverlapPolicy, SGLangStepPlan

FAKE_TOKEN_BASE = 100000
FAKE_TOKEN_STRIDE = 1000
MAX_REQUESTS = 100  # fake token ids must stay distinct per request
MAX_NEW_TOKENS = 999
MAX_ITERATIONS = 20000
CONFIG_KEYS = (
    "pool_tokens",
    "max_running",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "schedule_policy",
    "max_model_len",
    "enable_prefix_caching",
)
OPTIONAL_KEYS = ("page_size",)


def is_sglang_scenario(scenario: Any) -> bool:
    """Whether a scenario is in the SGLang format (its config names the SGLang pool and policy)."""
    cfg = scenario.get("config") if isinstance(scenario, dict) else None
    return isinstance(cfg, dict) and "pool_tokens" in cfg and "schedule_policy" in cfg


def _policy_options(cfg: dict) -> dict[str, Any]:
    """The scenario config as `sglang-overlap` options (a page is one KV block; block 0 is null)."""
    missing = [k for k in CONFIG_KEYS if k not in cfg]
    if missing:
        raise ScenarioError(f"config is missing {missing}")
    unknown = sorted(set(cfg) - set(CONFIG_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise ScenarioError(f"config: unknown keys {unknown}")
    page = int_field(cfg.get("page_size", 1), "config.page_size", 1)
    pool = int_field(cfg["pool_tokens"], "config.pool_tokens", 2)
    if pool % page:
        raise ScenarioError(f"config.pool_tokens ({pool}) must be a multiple of config.page_size ({page})")
    max_len = int_field(cfg["max_model_len"], "config.max_model_len", 1)
    chunk = cfg["chunked_prefill_size"]
    if chunk is not None:
        chunk = int_field(chunk, "config.chunked_prefill_size", 1)
    mpt = int_field(cfg["max_prefill_tokens"], "config.max_prefill_tokens", 1)
    if cfg["schedule_policy"] not in ("fcfs", "lpm"):
        raise ScenarioError(f"config.schedule_policy must be 'fcfs' or 'lpm', got {cfg['schedule_policy']!r}")
    if not isinstance(cfg["enable_prefix_caching"], bool):
        raise ScenarioError("config.enable_prefix_caching must be true or false")
    return dict(
        block_size=page,
        num_gpu_blocks=pool // page + 1,
        max_num_seqs=int_field(cfg["max_running"], "config.max_running", 1),
        max_num_batched_tokens=max(max_len, chunk or 0, mpt),
        max_model_len=max_len,
        enable_prefix_caching=cfg["enable_prefix_caching"],
        enable_chunked_prefill=chunk is not None,
        chunked_prefill_size=chunk,
        max_prefill_tokens=mpt,
        schedule_policy=cfg["schedule_policy"],
    )


def _requests(scenario: dict, policy: SGLangOverlapPolicy) -> dict[int, list[Request]]:
    """The requests by arrival iteration (list order within one), validated as SGLang serves them."""
    reqs = scenario.get("requests")
    if not isinstance(reqs, list) or len(reqs) > MAX_REQUESTS:
        raise ScenarioError(f"requests must be a list of at most {MAX_REQUESTS} entries")
    ids: set[str] = set()
    arrivals: dict[int, list[Request]] = {}
    for i, r in enumerate(reqs):
        where = f"requests[{i}]"
        rid = request_id(r, where, ids)
        prompt = token_ids(r.get("prompt"), f"{where} ({rid}).prompt", FAKE_TOKEN_BASE)
        if len(prompt) >= policy.max_req_input_len:
            raise ScenarioError(
                f"{where} ({rid}): prompt of {len(prompt)} tokens >= max_req_input_len "
                f"{policy.max_req_input_len} (SGLang aborts it)"
            )
        new = int_field(r.get("max_new_tokens"), f"{where} ({rid}).max_new_tokens", 1, MAX_NEW_TOKENS)
        at = int_field(r.get("arrival"), f"{where} ({rid}).arrival", 0)
        arrivals.setdefault(at, []).append(
            Request(rid, float(i), len(prompt), new, prompt_token_ids=list(prompt), eos_token_id=None)
        )
    return arrivals


def _fake_output(policy: SGLangOverlapPolicy, plan: StepPlan, index: dict[str, int]) -> StepResult:
    """The k-th output of request i is 100000 + 1000*i + k; a middle chunk samples nothing."""
    sampled: dict[str, list[int]] = {}
    for rid in plan.num_scheduled_tokens:
        req = policy.requests[rid]
        if req.is_prefill_chunk:
            sampled[rid] = []
            continue
        k = req.num_computed_tokens - req.prompt_len + 1
        sampled[rid] = [FAKE_TOKEN_BASE + FAKE_TOKEN_STRIDE * index[rid] + k]
    return StepResult(step_id=plan.step_id, sampled_token_ids=sampled)


def _line(step: int, plan: SGLangStepPlan, finished: list[str]) -> dict[str, Any]:
    """One iteration's log line."""
    line: dict[str, Any] = {"step": step, "mode": plan.forward_mode}
    if plan.forward_mode == "extend":
        line["extend"] = [[rid, plan.context_lens[rid], n] for rid, n in plan.num_scheduled_tokens.items()]
    elif plan.forward_mode == "decode":
        line["decode"] = list(plan.num_scheduled_tokens)
    elif plan.forward_mode != "idle":
        raise ScenarioError(f"step {step}: forward mode {plan.forward_mode!r} is outside the format")
    if plan.preempted_req_ids:
        line["retracted"] = list(plan.preempted_req_ids)
    if finished:
        line["finished"] = finished
    return line


def run_scenario(scenario: dict) -> list[dict[str, Any]]:
    """Replay a scenario through the overlap loop; one log dict per iteration."""
    if not isinstance(scenario, dict) or not isinstance(scenario.get("config"), dict):
        raise ScenarioError("a scenario is an object with a config object")
    try:
        policy = make_policy("sglang-overlap", **_policy_options(scenario["config"]))
    except ScenarioError:
        raise
    except ValueError as e:
        raise ScenarioError(f"config rejected: {e}") from e
    assert isinstance(policy, SGLangOverlapPolicy)
    arrivals = _requests(scenario, policy)
    index = {r["id"]: i for i, r in enumerate(scenario["requests"])}
    last_arrival = max(arrivals, default=-1)
    in_flight: list[tuple[StepPlan, StepResult]] = []
    log: list[dict[str, Any]] = []
    step = 0
    while step <= last_arrival or policy.requests or any(not p.is_empty for p, _ in in_flight):
        if step >= MAX_ITERATIONS:
            raise RuntimeError(f"no end after {MAX_ITERATIONS} iterations")
        for req in arrivals.get(step, ()):
            policy.add_request(req)
        plan = policy.schedule()
        assert isinstance(plan, SGLangStepPlan)
        in_flight.append((plan, _fake_output(policy, plan, index)))
        finished: list[str] = []
        if len(in_flight) >= policy.max_concurrent_batches:
            done, result = in_flight.pop(0)
            finished = [
                o.request_id for o in policy.update_from_output(done, result) if o.finish_reason is not None
            ]
        log.append(_line(step, plan, finished))
        step += 1
    return log


def replay(scenario: Any) -> Outcome:
    """The scenario's overlap-loop log (an invalid scenario raises ScenarioError)."""
    return Outcome(format_log(run_scenario(scenario)))
