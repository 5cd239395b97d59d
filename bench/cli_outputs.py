"""What `schedsim run` adds on top of simulate(): writing the parquet tables, JSONs and PNG plots.

usage: python bench/cli_outputs.py [NUM_REQUESTS]   (default 2000 requests of the default trace)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from schedsim.outputs.files import write_run
from schedsim.outputs.plots import write_run_plots
from schedsim.run.config import RunConfig
from schedsim.run.simulate import simulate


def main() -> None:
    """Print simulate, table-writing and plotting wall times and the output sizes."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    t0 = time.perf_counter()
    result = simulate(RunConfig(max_requests=n))
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        write_run(result, out, plots=False)
        t2 = time.perf_counter()
        write_run_plots(result, out)
        t3 = time.perf_counter()
        sizes = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
    print(f"requests={n} steps={len(result.steps)} timeline_rows={len(result.timeline)}")
    print(f"simulate_wall_s={t1 - t0:.2f} tables_and_json_s={t2 - t1:.2f} plots_s={t3 - t2:.2f}")
    for name, size in sizes.items():
        print(f"  {name:28s} {size / 1024:8.1f} KiB")


if __name__ == "__main__":
    main()
