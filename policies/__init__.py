"""schedsim.policies: the step interface, the KV block manager and every scheduler policy."""

from .config import SchedulerConfig
from .interface import (Executor, Policy, PolicyInfo, get_policy_info, list_policies, make_policy,
                        register_policy)
from .plan import RequestOutput, StepPlan, StepResult
from .request import Request, RequestStatus

# Policy modules register themselves on import; add each new one here.
# (imports appended below by each policy module's author)

__all__ = ["Executor", "Policy", "PolicyInfo", "Request", "RequestOutput", "RequestStatus",
           "SchedulerConfig", "StepPlan", "StepResult", "get_policy_info", "list_policies",
           "make_policy", "register_policy"]
from . import vllm as vllm  # noqa: E402  (registers "vllm" and "vllm-async")
from . import trtllm as trtllm  # noqa: E402  (registers "trtllm:<capacity policy>")
from . import sglang as sglang  # noqa: E402  (registers "sglang-overlap")
from . import baselines as baselines  # noqa: E402  (registers "orca", "sarathi", "static")
