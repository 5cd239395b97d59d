"""vLLM V1 scheduler policies: `vllm` (Scheduler) and `vllm-async` (AsyncScheduler), vLLM 0.33.0.

| file                 | vLLM's                                  |
|----------------------|-----------------------------------------|
| `scheduler.py`       | `vllm/v1/core/sched/scheduler.py`       |
| `async_scheduler.py` | `vllm/v1/core/sched/async_scheduler.py` |
| `request_queue.py`   | `vllm/v1/core/sched/request_queue.py`   |
| `utils.py`           | `vllm/v1/core/sched/utils.py` (`check_stop`) |
| `structured_output.py` | `vllm/v1/structured_output/__init__.py` (`StructuredOutputManager`) |
| `kv_connector.py`    | `distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py` (scheduler side) |
| `config.py`          | the SchedulerConfig/CacheConfig (and KVTransferConfig) knobs the scheduler reads |
| `fastforward.py`     | none: the simulator's exact fast-forward, a companion of the scheduler |

The KV cache manager with prefix caching is `schedsim.policies.kv_cache`.
"""

from ..registry import register_policy
from .async_scheduler import AsyncScheduler
from .config import VllmConfig
from .scheduler import Scheduler

# registered here, not by class decorators: a decorated class cannot be compiled (schedsim.accel)
register_policy(
    "vllm",
    "vLLM 0.33.0 V1 scheduler: unified token budget, chunked prefill, prefix "
    "caching, recompute preemption (1 batch in flight)",
    VllmConfig,
)(Scheduler)
register_policy(
    "vllm-async",
    "vLLM 0.33.0 AsyncScheduler: schedules step s+1 before step s's "
    "output returns, using output placeholders (2 batches in flight)",
    VllmConfig,
)(AsyncScheduler)

__all__ = ["AsyncScheduler", "Scheduler", "VllmConfig"]
