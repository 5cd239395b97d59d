"""schedsim.policies: the step interface, the KV block manager and every scheduler policy."""

# Policy packages register their names on import.
from . import baselines as baselines  # "orca", "sarathi", "static"
from . import sglang as sglang  # "sglang-overlap"
from . import trtllm as trtllm  # "trtllm:<capacity policy>"
from . import vllm as vllm  # "vllm", "vllm-async"
from .config import SchedulerConfig
from .interface import (
    Executor,
    FastForwardHooks,
    HasRunCounters,
    Policy,
    PolicyInfo,
    SupportsFastForward,
    get_policy_info,
    list_policies,
    make_policy,
    register_policy,
)
from .plan import RequestOutput, StepPlan, StepResult
from .request import Request, RequestStatus

__all__ = [
    "Executor",
    "FastForwardHooks",
    "HasRunCounters",
    "Policy",
    "PolicyInfo",
    "Request",
    "RequestOutput",
    "RequestStatus",
    "SchedulerConfig",
    "SupportsFastForward",
    "StepPlan",
    "StepResult",
    "get_policy_info",
    "list_policies",
    "make_policy",
    "register_policy",
]
