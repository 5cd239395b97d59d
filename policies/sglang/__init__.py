"""SGLang's overlap scheduler (`sglang-overlap`) on the shared step interface."""

from ..registry import register_policy
from .config import SGLangConfig
from .plan import SGLangStepPlan
from .scheduler import SGLangOverlapPolicy

# registered here, not by a class decorator: a decorated class cannot be compiled (schedsim.accel)
register_policy(
    "sglang-overlap",
    "SGLang 0.5.23 overlap scheduler: radix prefix cache, "
    "prefill-first PrefillAdder, retract on OOM, one-step-late finishes",
    SGLangConfig,
)(SGLangOverlapPolicy)

__all__ = ["SGLangConfig", "SGLangOverlapPolicy", "SGLangStepPlan"]
