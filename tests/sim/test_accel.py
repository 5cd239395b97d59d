"""The compiled core (schedsim.accel): loaded only when built from the sources on disk, and exact.

The same sources run compiled (mypyc) or interpreted, so every other test checks the compiled
build when it is active; here: the loader's rules, and tables byte-identical to a pure-Python run
of the same configurations (a child process with SCHEDSIM_PURE=1).
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from schedsim import RunConfig, accel, simulate

ACTIVE = accel.status().active
COMPARED = [  # policy, engine, trace, pool (None: the default one), requests
    ("vllm-async", "auto", "azure-conv-2023", None, 400),
    ("vllm", "auto", "azure-code-2023", 700, 120),
    ("vllm-async", "auto", "mooncake-synthetic", 900, 120),
    ("trtllm:max-utilization", "auto", "azure-conv-2023", 700, 120),
    ("sglang-overlap", "auto", "azure-conv-2023", 700, 120),
    ("orca", "auto", "azure-conv-2023", None, 150),
]


def test_required_build_is_active() -> None:
    """`make test` sets SCHEDSIM_REQUIRE_ACCEL: there the hot modules must be the extensions."""
    if os.environ.get("SCHEDSIM_REQUIRE_ACCEL", "") in ("", "0"):
        pytest.skip("SCHEDSIM_REQUIRE_ACCEL not set")
    assert ACTIVE, accel.status().reason
    for name in accel.COMPILED_MODULES:
        module = sys.modules.get(name) or __import__(name, fromlist=["_"])
        assert isinstance(module.__loader__, importlib.machinery.ExtensionFileLoader), name


def _manifest() -> dict:
    """A manifest matching the sources now on disk (as the build writes it)."""
    modules = {
        m: {"so": f"{m}.so", "sha256": accel.file_hash(accel.source_path(m))} for m in accel.COMPILED_MODULES
    }
    return {
        "ext_suffix": importlib.machinery.EXTENSION_SUFFIXES[0],
        "modules": modules,
        "group": {"name": accel.GROUP + "__mypyc", "so": "group.so"},
    }


def test_a_changed_source_disables_the_whole_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One stale module: nothing compiled is served, and the reason names the file."""
    monkeypatch.setattr(accel, "COMPILED_DIR", tmp_path)
    manifest = _manifest()
    for entry in [*manifest["modules"].values(), manifest["group"]]:
        (tmp_path / entry["so"]).write_bytes(b"")
    extensions, why = accel.check_manifest(manifest)
    assert set(extensions) == {*accel.COMPILED_MODULES, manifest["group"]["name"]} and not why
    manifest["modules"]["schedsim.policies.kv_cache.block_pool"]["sha256"] = "0" * 64
    extensions, why = accel.check_manifest(manifest)
    assert extensions == {} and "policies/kv_cache/block_pool.py changed" in why


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"ext_suffix": ".cpython-00-other.so"}, "another interpreter"),
        ({"modules": {}}, "another list of modules"),
    ],
)
def test_a_build_for_something_else_is_refused(change: dict, reason: str) -> None:
    """Another ABI or another module list: refused before any file is looked at."""
    extensions, why = accel.check_manifest({**_manifest(), **change})
    assert extensions == {} and reason in why


def test_missing_extension_files_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Hashes match but an extension file is gone: refused, naming it."""
    monkeypatch.setattr(accel, "COMPILED_DIR", tmp_path)
    extensions, why = accel.check_manifest(_manifest())
    assert extensions == {} and "missing extension files" in why


def test_source_paths_follow_the_package_dirs() -> None:
    """Import names map onto the repository's folders (pyproject's package-dir)."""
    root = accel.REPO_ROOT
    assert accel.source_path("schedsim.policies.kv_cache.manager") == root / "policies/kv_cache/manager.py"
    assert accel.source_path("schedsim.fastforward.stretch") == root / "sim/fastforward/stretch.py"
    assert accel.source_path("schedsim.latency.roofline") == root / "sim/latency/roofline.py"
    with pytest.raises(ValueError, match="not a schedsim module"):
        accel.source_path("numpy.linalg")


def _config(policy: str, engine: str, trace: str, pool: int | None, n: int) -> RunConfig:
    """A small run; a small pool makes it preempt, pause or retract."""
    extra = {"num_gpu_blocks": pool, "max_model_len": 8192} if pool else {}
    return RunConfig(policy=policy, engine=engine, trace=trace, max_requests=n, record_itl=True, **extra)


def _hashes(res: object) -> dict[str, str]:
    """A digest of every table and of the summary without wall-clock fields."""
    out = {
        name: str(pd.util.hash_pandas_object(getattr(res, name), index=True).sum())
        for name in ("requests", "steps", "timeline", "itl")
    }
    summary = {k: v for k, v in res.summary.items() if k != "sim_wall_s"}
    out["summary"] = json.dumps(summary, sort_keys=True, default=str)
    return out


_CHILD = """
import json, sys
from schedsim import RunConfig, accel, simulate
sys.path.insert(0, {tests!r})
from test_accel import COMPARED, _config, _hashes
assert not accel.status().active, accel.status().reason
print(json.dumps([_hashes(simulate(_config(*case))) for case in COMPARED]))
"""


@pytest.mark.skipif(not ACTIVE, reason="the compiled core is not active in this process")
def test_compiled_and_pure_python_runs_are_identical() -> None:
    """Same configurations in a SCHEDSIM_PURE=1 child: identical tables and summaries."""
    env = {**os.environ, "SCHEDSIM_PURE": "1"}
    code = _CHILD.format(tests=str(Path(__file__).parent))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=900
    )
    pure = json.loads(out.stdout.strip().splitlines()[-1])
    for case, want in zip(COMPARED, pure, strict=True):
        assert _hashes(simulate(_config(*case))) == want, case
