"""Request features a policy does not model: refused where the configuration asks for them, named
where the workload carries them, so that a run never treats them as plain requests unsaid."""

from __future__ import annotations

import warnings
from typing import Any

from schedsim.policies import SupportsAdapters, SupportsGrammarBitmask
from schedsim.run.config import RunConfig
from schedsim.run.fieldtypes import field_error
from schedsim.traces import TraceWarning

STRUCTURED_POLICIES = "vllm and vllm-async model it"
ADAPTER_POLICIES = "the trtllm:* policies model it with --policy-option max_peft_pages=N"


def models_structured_output(policy: Any) -> bool:
    """Grammar-constrained requests change this policy's schedule (vLLM's grammar bitmask)."""
    return isinstance(policy, SupportsGrammarBitmask)


def models_adapters(policy: Any) -> bool:
    """A request's lora_id changes this policy's schedule."""
    return isinstance(policy, SupportsAdapters) and policy.budgets_adapters()


def check_structured_fraction(config: RunConfig, policy: Any) -> None:
    """structured_fraction asks for structured output: refused under a policy that ignores it."""
    if config.structured_fraction and not models_structured_output(policy):
        raise field_error(
            "structured_fraction",
            f"structured output is not modelled by {config.policy!r} ({STRUCTURED_POLICIES}); "
            "its requests would run as plain ones",
            config.structured_fraction,
        )


def warn_unmodelled(config: RunConfig, policy: Any, structured: Any, lora: list) -> None:
    """A TraceWarning for each workload column the policy ignores (structured_output, lora_id)."""
    total = len(lora)
    asked = int(structured.sum()) if not models_structured_output(policy) else 0
    if asked:
        _warn(
            asked,
            total,
            "ask for structured output (the structured_output column)",
            config,
            STRUCTURED_POLICIES,
        )
    named = sum(x is not None for x in lora) if not models_adapters(policy) else 0
    if named:
        _warn(named, total, "name a LoRA adapter (the lora_id column)", config, ADAPTER_POLICIES)


def _warn(count: int, total: int, what: str, config: RunConfig, who: str) -> None:
    """One line: how many requests carry the feature, and who models it."""
    warnings.warn(
        f"{count:,} of {total:,} requests {what}, which {config.policy!r} does not model ({who}): "
        "they run as plain requests",
        TraceWarning,
        stacklevel=3,
    )
