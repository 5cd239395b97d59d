"""Run under the oracle's venv: read scenario JSON lines on stdin, answer each with its step log.

One vLLM import for a whole hypothesis run (the oracle's CLI pays ~7-30 s per process).
Answer per line: {"ok": true, "lines": [...]} or {"ok": false, "error": "..."}.
The oracle module is `$SCHEDSIM_ORACLE_DIR/vllm_oracle.py` (docs/policies-vllm.md).
"""

import importlib.util
import json
import os
import sys
from pathlib import Path

# Python put this script's folder first on sys.path: the test helpers there must not stand in for
# the packages vLLM imports
here = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]

path = Path(os.environ["SCHEDSIM_ORACLE_DIR"]) / "vllm_oracle.py"
spec = importlib.util.spec_from_file_location("vllm_oracle", path)
assert spec is not None and spec.loader is not None, f"no oracle at {path}"
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)

out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # anything vLLM prints goes to stderr
oracle.ensure_fake_model()
for line in sys.stdin:
    sc = json.loads(line)
    try:
        cfg = oracle.validate(sc)
        ans = {"ok": True, "lines": oracle.run_scenario(sc, cfg)}
    except Exception as e:  # noqa: BLE001 - reported to the test
        ans = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    out.write(json.dumps(ans) + "\n")
    out.flush()
