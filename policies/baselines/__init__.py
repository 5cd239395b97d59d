"""Classic scheduler baselines on the shared step interface (`orca`, `sarathi`, `static`), and
BasePolicy, the bookkeeping they share with SGLang's policy and with user-written policies."""

from .base import BasePolicy
from .orca import OrcaConfig, OrcaPolicy
from .sarathi import SarathiConfig, SarathiPolicy
from .static import StaticConfig, StaticPolicy

__all__ = [
    "BasePolicy",
    "OrcaConfig",
    "OrcaPolicy",
    "SarathiConfig",
    "SarathiPolicy",
    "StaticConfig",
    "StaticPolicy",
]
