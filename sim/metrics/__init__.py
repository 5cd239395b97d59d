"""Metrics: the recorder the engine loop reports to, and the tables and summary built from it.

| module | owns |
|---|---|
| `recorder.py` | the engine observer and world hooks, writing columnar buffers (no pandas) |
| `column.py`, `runlength.py` | typed append-mostly columns; run-length encoded inter-token gaps |
| `rows.py`, `jumps.py` | which rows ordinary steps and fast-forward jumps contribute |
| `hol.py` | head-of-line blocking time |
| `workload.py` | the per-request workload fields the results need |
| `tables.py` | buffers into the RunResult tables |
| `summary.py` | the run summary (benchmark figures, busy-time overlap, SLO goodput) |

A new per-step or per-request figure starts in `recorder.py` and ends in `tables.py`.
"""
