"""The live oracle's server imports the engine, not a test helper of the same name: it drops its own
folder (tests/support, the helpers) from the import path before loading the oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure_python
SERVER = Path(__file__).parent.parent / "support" / "vllm_oracle_server.py"

# a stand-in oracle: answers each scenario with where `vllm` and a helper module would import from
STUB = """
import importlib.util

def ensure_fake_model():
    pass

def validate(sc):
    return sc

def run_scenario(sc, cfg):
    return [str(getattr(importlib.util.find_spec(name), "origin", None)) for name in sc["names"]]
"""


def test_the_server_imports_nothing_from_the_helpers_folder(tmp_path: Path) -> None:
    (tmp_path / "vllm_oracle.py").write_text(STUB)
    env = {**os.environ, "SCHEDSIM_ORACLE_DIR": str(tmp_path)}
    names = [p.stem for p in SERVER.parent.glob("*.py")]  # every helper, as if it were a package
    answer = subprocess.run(
        [sys.executable, str(SERVER)],
        input=json.dumps({"names": names}) + "\n",
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=60,
        check=True,
    ).stdout
    reply = json.loads(answer)
    assert reply["ok"], reply
    assert len(reply["lines"]) == len(names)
    assert not [o for o in reply["lines"] if str(SERVER.parent) in o], reply["lines"]
