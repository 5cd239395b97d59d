"""schedsim.policies: the step interface, the KV block managers and every scheduler policy.

| module / package | owns |
|------------------|------|
| `request.py`, `plan.py` | Request (workload item + scheduling state), StepPlan, StepResult, RequestOutput |
| `kv_transfer.py` | KVTransferParams: the prefill/decode disaggregation contract |
| `interface.py` | Policy and Executor protocols; optional capabilities (fast-forward, KV transfer...) |
| `registry.py` | policy names -> policies; plugins through the `schedsim.policies` entry points |
| `plugin_registry.py` | the named registry with entry-point plugins that policies and routers share |
| `config.py` | SchedulerConfig, the knobs every policy shares |
| `kv_cache/` | vLLM's KV block pool and manager with hash-based prefix caching |
| `fastforward.py` | the policy side of exact fast-forward, shared by the companions |
| `vllm/`, `trtllm/`, `sglang/`, `baselines/` | one package per scheduler family |

Pure Python: imports nothing of the simulator, no simpy/numpy/pandas/torch.
"""

# Policy packages register their names on import.
from . import baselines as baselines  # "orca", "sarathi", "static"
from . import sglang as sglang  # "sglang-overlap"
from . import trtllm as trtllm  # "trtllm:<capacity policy>"
from . import vllm as vllm  # "vllm", "vllm-async"
from .config import SchedulerConfig
from .interface import (
    EngineFailure,
    Executor,
    FastForwardHooks,
    HasRunCounters,
    Policy,
    RequestRejected,
    SupportsAdapters,
    SupportsFastForward,
    SupportsGrammarBitmask,
    SupportsKVTransfer,
)
from .kv_transfer import KVTransferParams
from .plan import RequestOutput, StepPlan, StepResult
from .registry import (
    ENTRY_POINT_GROUP,
    PolicyInfo,
    get_policy_info,
    list_policies,
    load_plugins,
    make_policy,
    register_policy,
)
from .request import Request, RequestStatus

__all__ = [
    "ENTRY_POINT_GROUP",
    "EngineFailure",
    "Executor",
    "FastForwardHooks",
    "HasRunCounters",
    "KVTransferParams",
    "Policy",
    "PolicyInfo",
    "Request",
    "RequestOutput",
    "RequestRejected",
    "RequestStatus",
    "SchedulerConfig",
    "SupportsFastForward",
    "SupportsGrammarBitmask",
    "SupportsAdapters",
    "SupportsKVTransfer",
    "StepPlan",
    "StepResult",
    "get_policy_info",
    "list_policies",
    "load_plugins",
    "make_policy",
    "register_policy",
]
