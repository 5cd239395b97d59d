"""One run end to end: its config, resolving it into models and a policy, and running it.

| module | owns |
|---|---|
| `config.py` | RunConfig, every knob of one run |
| `toml_config.py` | TOML run files layered under CLI overrides |
| `resolve.py` | RunConfig into model/GPU specs, KV pool size, latency and CPU models, policy options |
| `workload.py` | the trace selected and prepared into columns, oracle targets and faults |
| `simulate.py` | `simulate()`: the engine loop in the SimPy world |
| `real.py` | `run_real()`: the engine loop on the real backend |
| `result.py` | RunResult, the tables with their column schemas |
| `memory.py` | keeping the heap compact over long traces |
"""
