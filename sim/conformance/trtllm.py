"""`schedsim conformance SCENARIO.json`: replay a TensorRT-LLM scenario on the `trtllm:*` policies.

A scenario (JSON) names a capacity policy, a configuration and requests with token ids:
`{"name", "policy": "max-requests"|"guaranteed-no-evict"|"static-batch"|"max-utilization",
"config": {"block_size", "num_blocks" (usable KV blocks), "max_batch_size", "max_num_tokens",
"chunking": null|"first-come-first-served"|"equal-progress"|"force-chunk", "chunk_unit_size",
"enable_block_reuse", "prefix_aware", "two_step_lookahead", "max_input_len", "max_seq_len"},
"requests": [{"id", "arrival_step", "prompt": [token ids], "max_new_tokens"}], "num_steps"}`.

One step is PyExecutor's without the overlap scheduler: this step's arrivals join the executor
queue; schedule; log; every context advances one chunk (its last chunk samples), every
generation samples one token; the k-th output token of the request at list index i is
`100000 + 1000*i + k` (k counts positions after the original prompt, so a token regenerated after
a truncating pause has the same id); no EOS. One JSON line per step:
`{"step", "ctx": [[id, chunk_start_after_reuse, chunk_size], ...] (batch order), "gen": [ids]
(batch order), "paused": [ids] (pause order), "finished": [ids] (sorted)}`.

Exit status: 0, 2 for an invalid scenario (or one TensorRT-LLM would reject), 3 where TensorRT-LLM
itself fails or wedges (the log up to that step is printed, the reason goes to stderr).
`--batch OUTDIR A.json ...` writes OUTDIR/<name>.jsonl per scenario, plus <name>.err (the reason)
when it is invalid or fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schedsim.conformance.files import Outcome, ScenarioError, format_log, int_field, request_id, token_ids
from schedsim.policies import Request, StepPlan, StepResult, make_policy
from schedsim.policies.trtllm import TrtllmFailure, TrtllmPolicy

POLICIES = ("max-requests", "guaranteed-no-evict", "static-batch", "max-utilization")
CHUNKING = (None, "first-come-first-served", "equal-progress", "force-chunk")
CONFIG_DEFAULTS: dict[str, Any] = {
    "block_size": 16,
    "num_blocks": 64,
    "max_batch_size": 4,
    "max_num_tokens": 256,
    "chunking": None,
    "chunk_unit_size": None,
    "enable_block_reuse": True,
    "prefix_aware": True,
    "two_step_lookahead": False,
    "max_input_len": None,
    "max_seq_len": 512,
}
MAX_PROMPT_TOKEN = 100000  # output ids start here
EXIT_TRTLLM_FAILS = 3


def _check_config(cfg: dict[str, Any]) -> None:
    """Field types, then the configurations TensorRT-LLM rejects or turns into something else."""
    for key in (
        "block_size",
        "num_blocks",
        "max_batch_size",
        "max_num_tokens",
        "max_seq_len",
        "chunk_unit_size",
        "max_input_len",
    ):
        int_field(cfg[key], f"config.{key}", 1)
    for key in ("enable_block_reuse", "prefix_aware", "two_step_lookahead"):
        if not isinstance(cfg[key], bool):
            raise ScenarioError(f"config.{key} must be true or false, got {cfg[key]!r}")
    if cfg["chunking"] not in CHUNKING:
        raise ScenarioError(f"config.chunking must be one of {list(CHUNKING)}, got {cfg['chunking']!r}")
    bs = cfg["block_size"]
    if cfg["chunk_unit_size"] % bs:
        raise ScenarioError(
            f"config.chunk_unit_size ({cfg['chunk_unit_size']}) must be a multiple of "
            f"block_size ({bs}): a non-last chunk must end on a block boundary"
        )
    if not cfg["max_input_len"] < cfg["max_seq_len"]:
        raise ScenarioError(
            f"config.max_input_len ({cfg['max_input_len']}) must be < max_seq_len ({cfg['max_seq_len']})"
        )
    if cfg["num_blocks"] * bs < cfg["max_seq_len"]:
        raise ScenarioError(
            f"config.num_blocks * block_size ({cfg['num_blocks'] * bs}) must be >= "
            f"max_seq_len ({cfg['max_seq_len']}): TensorRT-LLM would shrink the attention "
            "window to the pool"
        )
    if cfg["chunking"] is None and cfg["max_num_tokens"] < cfg["max_input_len"]:
        raise ScenarioError(
            f"config.max_num_tokens ({cfg['max_num_tokens']}) must be >= max_input_len "
            f"({cfg['max_input_len']}) without chunking"
        )
    if cfg["chunking"] is not None and cfg["max_num_tokens"] < cfg["chunk_unit_size"]:
        raise ScenarioError(
            f"config.chunk_unit_size ({cfg['chunk_unit_size']}) must be <= max_num_tokens "
            f"({cfg['max_num_tokens']})"
        )


def _check_request(r: Any, idx: int, cfg: dict[str, Any], ids: set[str]) -> None:
    """One request entry, named by its index and id."""
    where = f"requests[{idx}]"
    rid = request_id(r, where, ids)
    prompt = token_ids(r.get("prompt"), f"{where} ({rid}).prompt", MAX_PROMPT_TOKEN)
    new = int_field(r.get("max_new_tokens"), f"{where} ({rid}).max_new_tokens", 1)
    if len(prompt) > cfg["max_input_len"]:
        raise ScenarioError(
            f"{where} ({rid}): prompt ({len(prompt)}) > max_input_len ({cfg['max_input_len']})"
        )
    if len(prompt) + new > cfg["max_seq_len"]:
        raise ScenarioError(
            f"{where} ({rid}): prompt ({len(prompt)}) + max_new_tokens ({new}) > "
            f"max_seq_len ({cfg['max_seq_len']})"
        )
    int_field(r.get("arrival_step", 0), f"{where} ({rid}).arrival_step", 0)


def validate(scenario: Any) -> dict[str, Any]:
    """The format plus TensorRT-LLM's own checks; returns the full config (defaults filled in)."""
    if not isinstance(scenario, dict):
        raise ScenarioError("a scenario must be a JSON object")
    if scenario.get("policy") not in POLICIES:
        raise ScenarioError(f"policy must be one of {list(POLICIES)}, got {scenario.get('policy')!r}")
    given = scenario.get("config", {})
    if not isinstance(given, dict):
        raise ScenarioError("config must be an object")
    unknown = set(given) - set(CONFIG_DEFAULTS)
    if unknown:
        raise ScenarioError(f"config: unknown keys {sorted(unknown)}")
    cfg = dict(CONFIG_DEFAULTS, **given)
    if cfg["chunk_unit_size"] is None:
        cfg["chunk_unit_size"] = cfg["block_size"]
    if cfg["max_input_len"] is None and isinstance(cfg["max_seq_len"], int):
        cfg["max_input_len"] = cfg["max_seq_len"] - 1
    _check_config(cfg)
    int_field(scenario.get("num_steps"), "num_steps", 0)
    requests = scenario.get("requests", [])
    if not isinstance(requests, list):
        raise ScenarioError("requests must be a list")
    ids: set[str] = set()
    for idx, r in enumerate(requests):
        _check_request(r, idx, cfg, ids)
    return cfg


def build_policy(policy: str, cfg: dict[str, Any], options: Mapping[str, Any] | None = None) -> TrtllmPolicy:
    """The `trtllm:<policy>` policy for a validated config: `num_blocks` usable blocks (plus the null
    block); `options`: TrtllmConfig fields on top (schedsim's own, e.g. started_contexts_in_first_pass)."""
    blocks = cfg["num_blocks"]
    settings: dict[str, Any] = dict(
        block_size=cfg["block_size"],
        num_gpu_blocks=blocks + 1,
        max_num_seqs=cfg["max_batch_size"],
        max_num_batched_tokens=max(cfg["max_num_tokens"], cfg["max_seq_len"]),
        max_model_len=cfg["max_seq_len"],
        enable_prefix_caching=cfg["enable_block_reuse"],
        enable_chunked_prefill=cfg["chunking"] is not None,
        chunk_unit_size=cfg["chunk_unit_size"],
        enable_prefix_aware_scheduling=cfg["prefix_aware"],
        two_step_lookahead=cfg["two_step_lookahead"],
        max_batch_size=cfg["max_batch_size"],
        max_num_tokens=cfg["max_num_tokens"],
        max_input_len=cfg["max_input_len"],
    )
    if cfg["chunking"] is not None:
        settings["chunking_policy"] = cfg["chunking"]
    made = make_policy(f"trtllm:{policy}", **settings, **(options or {}))
    assert isinstance(made, TrtllmPolicy)
    return made


def _outputs(policy: TrtllmPolicy, plan: StepPlan, index: dict[str, int]) -> StepResult:
    """Last chunks and generations sample `100000 + 1000*i + k`; other chunks sample nothing."""
    sampled: dict[str, list[int]] = {}
    for rid, n in plan.num_scheduled_tokens.items():
        req = policy.requests[rid]
        if req.is_context_init_state and plan.context_lens[rid] + n < req.prompt_len:
            sampled[rid] = []
            continue
        k = len(req.request.output_token_ids) + 1
        sampled[rid] = [100000 + 1000 * index[rid] + k]
    return StepResult(step_id=plan.step_id, sampled_token_ids=sampled)


def _log_line(policy: TrtllmPolicy, step: int, plan: StepPlan) -> dict[str, Any]:
    """The step's contexts (start after reuse, chunk) and generations in batch order, and its pauses."""
    ctx: list[list[Any]] = []
    gen: list[str] = []
    for rid, n in plan.num_scheduled_tokens.items():
        if policy.requests[rid].is_context_init_state:
            drafts = len(plan.spec_decode_tokens.get(rid, ()))
            ctx.append([rid, plan.context_lens[rid], n - drafts])
        else:
            gen.append(rid)
    return {"step": step, "ctx": ctx, "gen": gen, "paused": list(plan.paused_req_ids), "finished": []}


def run_scenario(
    scenario: dict[str, Any],
    log: list[dict[str, Any]] | None = None,
    options: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Replay a scenario; returns one log line per step.

    Raises ScenarioError (invalid) or TrtllmFailure (TensorRT-LLM fails or wedges); `log`, if given,
    receives the lines as they are made, so the steps before a failure stay readable. `options`:
    policy options on top of the scenario's config (see build_policy).
    """
    cfg = validate(scenario)
    try:
        policy = build_policy(scenario["policy"], cfg, options)
    except ValueError as exc:
        raise ScenarioError(f"config rejected: {exc}") from exc
    arrivals: dict[int, list[Request]] = {}
    index: dict[str, int] = {}
    for idx, r in enumerate(scenario.get("requests", [])):
        request = Request(
            r["id"],
            float(idx),
            len(r["prompt"]),
            r["max_new_tokens"],
            prompt_token_ids=list(r["prompt"]),
            eos_token_id=None,
            ignore_eos=True,
        )
        arrivals.setdefault(r.get("arrival_step", 0), []).append(request)
        index[r["id"]] = idx
    lines = [] if log is None else log
    for step in range(scenario["num_steps"]):
        for request in arrivals.get(step, ()):
            policy.add_request(request)
        plan = policy.schedule()
        line = _log_line(policy, step, plan)
        outputs = policy.update_from_output(plan, _outputs(policy, plan, index))
        line["finished"] = sorted(o.request_id for o in outputs if o.finish_reason is not None)
        lines.append(line)
    return lines


def replay(scenario: Any) -> Outcome:
    """The scenario's step log; where TensorRT-LLM itself fails or wedges, the steps before it,
    EXIT_TRTLLM_FAILS and the cause."""
    log: list[dict[str, Any]] = []
    try:
        run_scenario(scenario, log)
    except TrtllmFailure as exc:
        return Outcome(format_log(log), EXIT_TRTLLM_FAILS, f"TensorRT-LLM fails ({exc.cause}): {exc}")
    return Outcome(format_log(log))
