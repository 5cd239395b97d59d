"""Worlds: what resolves the engine loop's waits, in simulated or in real time.

| module | owns |
|---|---|
| `simpy_world.py` | the SimPy world: GPU steps and CPU phases in simulated time |
| `executor.py` | the simulated executor: a StepPlan into a StepResult and a GPU time |
| `oracle.py` | the workload oracle: the model's outputs, deterministic from (seed, request, position) |
| `inputs.py` | arrivals and client aborts, handed to the engine when due |
| `realtime.py` | the real-time world around the real backend's executor |
"""
