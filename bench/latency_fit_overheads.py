"""Fit the overhead terms on every shipped measurement source; write sim/latency/data/overhead_fit.json.

Run: python bench/latency_fit_overheads.py   (about a minute on 2 cores)
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from schedsim.latency.crossval import shipped_fit_file
from schedsim.latency.interp import ExtrapolationWarning

OUT = Path(__file__).resolve().parents[1] / "sim" / "latency" / "data" / "overhead_fit.json"


def main() -> None:
    warnings.simplefilter("ignore", ExtrapolationWarning)
    fit = shipped_fit_file()
    OUT.write_text(json.dumps(fit, indent=1) + "\n")
    print(json.dumps({k: fit[k] for k in ("shared", "gpus", "engines", "fit_error")}, indent=1))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
