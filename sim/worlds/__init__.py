"""Worlds: what resolves the engine loop's waits, in simulated or in real time.

| module | owns |
|---|---|
| `simpy_world.py` | the SimPy world: GPU steps and CPU phases in simulated time |
| `executor.py` | the simulated executor: a StepPlan into a StepResult and a GPU time |
| `oracle.py` | the workload oracle: the model's outputs, deterministic from (seed, request, position) |
| `inputs.py` | arrivals and client aborts, handed to the engine when due |
| `inbox.py` | a cluster replica's inputs: what the router sent it |
| `kv_port.py` | what a replica's world needs from the cluster's KV transfers (prefill/decode pairs) |
| `realtime.py` | the real-time world around the real backend's executor |
"""
