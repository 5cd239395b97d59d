"""The engine loop, written once for every world: vLLM EngineCore's step and step_with_batch_queue.

| module | owns |
|---|---|
| `loop.py` | the loop: schedule, execute, update; the batch queue that keeps two batches in flight |
| `waits.py` | the waits the loop yields (GPU, CPU phases, arrivals) that a world resolves |

A change to how an engine iterates goes here; a change to how time passes goes in `worlds/`.
"""
