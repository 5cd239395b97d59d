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

import pytest
from schedsim import accel, simulate
from support.compiled import COMPARED, digests, run_config

ACTIVE = accel.status().active


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


_CHILD = """
import json
from schedsim import accel, simulate
from support.compiled import COMPARED, digests, run_config
assert not accel.status().active, accel.status().reason
print(json.dumps([digests(simulate(run_config(*case))) for case in COMPARED]))
"""


@pytest.mark.skipif(not ACTIVE, reason="the compiled core is not active in this process")
def test_compiled_and_pure_python_runs_are_identical() -> None:
    """Same configurations in a SCHEDSIM_PURE=1 child: identical tables and summaries."""
    env = {**os.environ, "SCHEDSIM_PURE": "1", "PYTHONPATH": str(Path(__file__).parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True, timeout=900
    )
    pure = json.loads(out.stdout.strip().splitlines()[-1])
    for case, want in zip(COMPARED, pure, strict=True):
        assert digests(simulate(run_config(*case))) == want, case
