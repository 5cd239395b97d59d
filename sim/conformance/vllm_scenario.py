"""The vLLM conformance scenario contract (docs/policies-vllm.md): what a scenario may hold and
what vLLM itself would reject, checked before anything runs (a ScenarioError names the field)."""

from __future__ import annotations

from typing import Any

from schedsim.conformance.files import ScenarioError, is_int

EOS_ID = 2
VOCAB_SIZE = 50272
MAX_POSITION_EMBEDDINGS = 2048  # the oracle's fake model: vLLM rejects a longer max_model_len
SPEC_METHODS = ("draft_model", "ngram")
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
    "num_spec_tokens": 0,
    "spec_method": "draft_model",
}
CONFIG_KEYS = tuple(CONFIG_DEFAULTS)


def _int_list(x: Any) -> bool:
    """A non-empty list of ints >= 0."""
    return isinstance(x, list) and bool(x) and all(is_int(v) and v >= 0 for v in x)


def _check_request(r: dict, idx: int, max_model_len: int, ids: set[str]) -> None:
    """Validate one request entry, naming it."""
    rid = r.get("id")
    where = f"requests[{idx}]"
    if not isinstance(rid, str) or rid in ids:
        raise ScenarioError(f"{where}.id missing or duplicated: {rid!r}")
    ids.add(rid)
    where = f"{where} ({rid})"
    p = r.get("prompt_token_ids")
    if not isinstance(p, list) or not p or not all(isinstance(t, int) and 0 <= t < VOCAB_SIZE for t in p):
        raise ScenarioError(f"{where}.prompt_token_ids must be non-empty ints in [0, {VOCAB_SIZE})")
    mt = r.get("max_tokens")
    if not isinstance(mt, int) or mt < 1:
        raise ScenarioError(f"{where}.max_tokens must be an int >= 1")
    if len(p) + mt > max_model_len:
        raise ScenarioError(
            f"{where}: prompt ({len(p)}) + max_tokens ({mt}) > max_model_len ({max_model_len})"
        )
    st = r.get("arrival_step", 0)
    if not isinstance(st, int) or st < 0:
        raise ScenarioError(f"{where}.arrival_step must be an int >= 0")
    ea = r.get("eos_after")
    if ea is not None and (not isinstance(ea, int) or ea < 1):
        raise ScenarioError(f"{where}.eos_after must be null or an int >= 1")
    if not isinstance(r.get("priority", 0), int):
        raise ScenarioError(f"{where}.priority must be an int")
    _check_extensions(r, where)


def _check_extensions(r: dict, where: str) -> None:
    """The speculative-decoding and structured-output fields of a request."""
    if "accept" in r and not _int_list(r["accept"]):
        raise ScenarioError(f"{where}.accept must be a non-empty list of ints >= 0")
    structured = r.get("structured", False)
    if not isinstance(structured, bool):
        raise ScenarioError(f"{where}.structured must be true or false")
    gd = r.get("grammar_delay", 0)
    if not is_int(gd) or gd < 0:
        raise ScenarioError(f"{where}.grammar_delay must be an int >= 0")
    if "valid_drafts" in r and not _int_list(r["valid_drafts"]):
        raise ScenarioError(f"{where}.valid_drafts must be a non-empty list of ints >= 0")
    if not structured and ("grammar_delay" in r or "valid_drafts" in r):
        raise ScenarioError(f"{where}: grammar_delay / valid_drafts need structured: true")


def _check_spec(cfg: dict[str, Any], policy: str) -> None:
    """num_spec_tokens and spec_method as vLLM's SpeculativeConfig/VllmConfig accept them."""
    k = cfg["num_spec_tokens"]
    if not is_int(k) or k < 0:
        raise ScenarioError(f"config.num_spec_tokens must be an int >= 0, got {k!r}")
    if cfg["spec_method"] not in SPEC_METHODS:
        raise ScenarioError(f"config.spec_method must be one of {SPEC_METHODS}, got {cfg['spec_method']!r}")
    if k > 0 and cfg["spec_method"] == "ngram" and policy == "vllm-async":
        raise ScenarioError(
            "config.spec_method 'ngram' cannot run with vllm-async "
            "(V1 model runner: no async scheduling with ngram)"
        )


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
    _check_spec(cfg, sc["policy"])
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
