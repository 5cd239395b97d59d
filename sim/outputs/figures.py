"""The figures of a run's output folder: which file, drawn by which function, from which table."""

from __future__ import annotations

# file, the `schedsim.outputs.plots` function that draws it, the RunResult table it reads
RUN_PLOTS = (
    ("latency_distributions.png", "plot_latency_distributions", "requests"),
    ("batch_kv.png", "plot_batch_and_kv", "steps"),
    ("busy_timeline.png", "plot_busy_timeline", "timeline"),
)
PLOT_FILES = tuple(name for name, _, _ in RUN_PLOTS)
# The figures the plot worker renders, and the columns each reads from its table (only these
# are shipped to it).
WORKER_COLUMNS: dict[str, tuple[str, ...]] = {
    "batch_kv.png": (
        "start",
        "end",
        "num_prefill_tokens",
        "num_decode_tokens",
        "num_prefill_reqs",
        "num_decode_reqs",
        "num_waiting",
        "kv_usage",
    ),
    "busy_timeline.png": ("step", "resource", "kind", "start", "end"),
}
