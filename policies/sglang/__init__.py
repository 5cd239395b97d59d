"""SGLang's overlap scheduler (`sglang-overlap`) on the shared step interface."""

from .config import SGLangConfig
from .plan import SGLangStepPlan
from .scheduler import SGLangOverlapPolicy

__all__ = ["SGLangConfig", "SGLangOverlapPolicy", "SGLangStepPlan"]
