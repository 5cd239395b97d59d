"""Classic scheduler baselines on the shared step interface: `orca`, `sarathi`, `static`."""

from .orca import OrcaConfig, OrcaPolicy
from .sarathi import SarathiConfig, SarathiPolicy
from .static import StaticConfig, StaticPolicy

__all__ = ["OrcaConfig", "OrcaPolicy", "SarathiConfig", "SarathiPolicy", "StaticConfig", "StaticPolicy"]
