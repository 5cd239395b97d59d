"""Exact fast-forward: many steady decode iterations of the engine loop in closed form.

| module | owns |
|---|---|
| `stretch.py` | FastForward: finds a steady stretch, asks the policy's companion for its length, jumps |
| `timeline.py` | the stretch's step and CPU-phase times, summed as the world would sum them |
| `commit.py` | what the jump writes into the metrics recorder (the rows k iterations write) |

The policy side lives in each policy family's `fastforward.py` companion; the exactness argument
is in docs/performance.md.
"""
