"""Experiments made of many runs: comparisons, parameter sweeps and validation against the backend.

| module | owns |
|---|---|
| `compare.py` | several policies or variant configs on one workload and seed, one table |
| `sweep.py` | a grid of runs on a local process pool, resumable, one parquet table |
| `sweep_ray.py` | the same sweep worker scheduled on a Ray cluster |
| `validate.py` | one small workload on the real backend and in the simulator, step by step |

Sits on top of `run/` and `outputs/`; the CLI sits on top of this.
"""
