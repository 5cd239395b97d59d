"""Classic scheduler baselines on the shared step interface (`orca`, `sarathi`, `static`), and
BasePolicy, the bookkeeping they share with SGLang's policy and with user-written policies."""

from ..registry import register_policy
from .base import BasePolicy
from .config import OrcaConfig, SarathiConfig, StaticConfig
from .orca import OrcaPolicy
from .sarathi import SarathiPolicy
from .static import StaticPolicy

# registered here, not by class decorators: a decorated class cannot be compiled (schedsim.accel)
register_policy(
    "orca", "Orca iteration-level batching: whole prompts, KV reserved to completion", OrcaConfig
)(OrcaPolicy)
register_policy(
    "sarathi",
    "Sarathi-Serve stall-free batching: decodes first, then prefill chunks up to the token budget",
    SarathiConfig,
)(SarathiPolicy)
register_policy(
    "static", "FasterTransformer request-level batching: no admission until the batch drains", StaticConfig
)(StaticPolicy)

__all__ = [
    "BasePolicy",
    "OrcaConfig",
    "OrcaPolicy",
    "SarathiConfig",
    "SarathiPolicy",
    "StaticConfig",
    "StaticPolicy",
]
