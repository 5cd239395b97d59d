"""schedsim.traces: the Workload table, trace loaders, generators and shipped samples."""

from .schema import OPTIONAL_COLUMNS, REQUIRED_COLUMNS

__all__ = ["OPTIONAL_COLUMNS", "REQUIRED_COLUMNS"]
