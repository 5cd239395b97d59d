"""The compiled core: the simulator's hot modules built with mypyc, loaded only when up to date.

The same Python sources run either interpreted or compiled to C extensions by mypyc
(`python -m schedsim.accel.build`, which `make` runs). The build writes the extensions and a
manifest (each module's source hash, the interpreter's ABI) under `sim/_compiled/`. On import,
`schedsim` calls `install()`: if every compiled module was built from the sources now on disk, a
meta-path finder serves the extensions instead of the `.py` files; if any source changed since,
nothing is installed and the run is pure Python, with a warning naming the stale file (a stale
extension must never run code that differs from the source). All or nothing: compiled modules
share native class layouts, so they are never mixed with interpreted copies of each other.
`SCHEDSIM_PURE=1` forces pure Python.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

# The hot path: data structures and loops that run per step, per request or per KV block.
COMPILED_MODULES = (
    "schedsim.policies.request",
    "schedsim.policies.recompute",
    "schedsim.policies.plan",
    "schedsim.policies.kv_cache.block_pool",
    "schedsim.policies.kv_cache.hashing",
    "schedsim.policies.kv_cache.manager",
    "schedsim.policies.fastforward",
    "schedsim.policies.vllm.request_queue",
    "schedsim.policies.vllm.utils",
    "schedsim.policies.vllm.fastforward",
    "schedsim.policies.vllm.scheduler",
    "schedsim.policies.vllm.async_scheduler",
    "schedsim.policies.trtllm.state",
    "schedsim.policies.trtllm.stats",
    "schedsim.policies.trtllm.prefix_aware",
    "schedsim.policies.trtllm.block_keys",
    "schedsim.policies.trtllm.radix_tree",
    "schedsim.policies.trtllm.eviction_policy",
    "schedsim.policies.trtllm.kv_cache_manager",
    "schedsim.policies.trtllm.kv_accounting",
    "schedsim.policies.trtllm.capacity",
    "schedsim.policies.trtllm.micro_batch",
    "schedsim.policies.trtllm.chunking",
    "schedsim.policies.trtllm.lifecycle",
    "schedsim.policies.trtllm.pause",
    "schedsim.policies.trtllm.scheduled_requests",
    "schedsim.policies.trtllm.resource_manager",
    "schedsim.policies.trtllm.cache_transceiver",
    "schedsim.policies.trtllm.policy",
    "schedsim.policies.trtllm.fastforward",
    "schedsim.policies.baselines.base",
    "schedsim.policies.baselines.fastforward",
    "schedsim.policies.baselines.orca",
    "schedsim.policies.baselines.sarathi",
    "schedsim.policies.baselines.static",
    "schedsim.policies.sglang.plan",
    "schedsim.policies.sglang.scheduler",
    "schedsim.policies.sglang.radix_cache",
    "schedsim.policies.sglang.mem_cache",
    "schedsim.policies.sglang.slots",
    "schedsim.policies.sglang.adder",
    "schedsim.policies.sglang.schedule_policy",
    "schedsim.policies.sglang.decode",
    "schedsim.policies.sglang.fastforward",
    "schedsim.engine.waits",
    "schedsim.metrics.runlength",
    "schedsim.metrics.column",
    "schedsim.worlds.oracle",
    "schedsim.worlds.executor",
    "schedsim.worlds.arrivals",
    "schedsim.worlds.inputs",
    "schedsim.engine.loop",
    "schedsim.metrics.hol",
    "schedsim.metrics.jumps",
    "schedsim.metrics.rows",
    "schedsim.metrics.recorder",
    "schedsim.fastforward.timeline",
    "schedsim.fastforward.commit",
    "schedsim.fastforward.stretch",
    "schedsim.worlds.simpy_world",
    "schedsim.latency.cpu_cost",
    "schedsim.latency.roofline",
    "schedsim.latency.overhead",
    "schedsim.latency.table",
    "schedsim.latency.interp",
)
GROUP = "schedsim_accel"  # mypyc's shared library: {GROUP}__mypyc
# import name prefix -> source folder in the repository (pyproject's package-dir)
PACKAGE_DIRS = {
    "schedsim.policies": "policies",
    "schedsim.traces": "traces",
    "schedsim.backend": "backend",
    "schedsim": "sim",
}
PACKAGE_DIR = Path(__file__).resolve().parent.parent  # sim/, the schedsim package
COMPILED_DIR = PACKAGE_DIR / "_compiled"
MANIFEST = COMPILED_DIR / "manifest.json"
REPO_ROOT = PACKAGE_DIR.parent


@dataclass
class AccelStatus:
    """Whether this process runs the compiled core, and why not if it does not."""

    active: bool = False
    reason: str = "not installed yet"
    modules: list[str] = field(default_factory=list)


STATUS = AccelStatus()


def source_path(module: str) -> Path:
    """The .py file of a module under the repository's package-dir layout."""
    for prefix, folder in PACKAGE_DIRS.items():
        if module == prefix or module.startswith(prefix + "."):
            rest = module[len(prefix) :].lstrip(".").split(".") if module != prefix else []
            return (
                REPO_ROOT.joinpath(folder, *rest).with_suffix(".py")
                if rest
                else REPO_ROOT / folder / "__init__.py"
            )
    raise ValueError(f"{module} is not a schedsim module")


def file_hash(path: Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Serves the compiled extension of each module the manifest lists."""

    def __init__(self, extensions: dict[str, Path]) -> None:
        self.extensions = extensions

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        so = self.extensions.get(fullname)
        if so is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(so))
        return importlib.util.spec_from_file_location(fullname, so, loader=loader)


def check_manifest(manifest: dict) -> tuple[dict[str, Path], str]:
    """The extensions to serve, or {} and the reason they must not be used."""
    if manifest.get("ext_suffix") not in importlib.machinery.EXTENSION_SUFFIXES:
        return {}, f"built for another interpreter ({manifest.get('ext_suffix')})"
    modules = manifest.get("modules", {})
    if sorted(modules) != sorted(COMPILED_MODULES):
        return {}, "built for another list of modules (rebuild: python -m schedsim.accel.build)"
    extensions: dict[str, Path] = {}
    for name, entry in modules.items():
        src = source_path(name)
        if not src.exists() or file_hash(src) != entry["sha256"]:
            return {}, (
                f"{src.relative_to(REPO_ROOT)} changed since the compiled core was built "
                "(rebuild: python -m schedsim.accel.build)"
            )
        extensions[name] = COMPILED_DIR / entry["so"]
    extensions[manifest["group"]["name"]] = COMPILED_DIR / manifest["group"]["so"]
    missing = [str(p) for p in extensions.values() if not p.exists()]
    if missing:
        return {}, f"missing extension files {missing}"
    return extensions, ""


def install() -> AccelStatus:
    """Put the compiled core in front of the sources if it matches them (see module docstring)."""
    if STATUS.active or STATUS.reason != "not installed yet":
        return STATUS
    if os.environ.get("SCHEDSIM_PURE", "") not in ("", "0"):
        STATUS.reason = "SCHEDSIM_PURE is set"
        return STATUS
    if not MANIFEST.exists():
        STATUS.reason = "not built (python -m schedsim.accel.build)"
        return STATUS
    try:
        extensions, why = check_manifest(json.loads(MANIFEST.read_text()))
    except (OSError, ValueError, KeyError) as e:
        extensions, why = {}, f"unreadable manifest {MANIFEST}: {e}"
    if not extensions:
        STATUS.reason = why
        warnings.warn(f"schedsim: compiled core not used, {why}; running pure Python", stacklevel=2)
        return STATUS
    sys.meta_path.insert(0, _CompiledFinder(extensions))
    STATUS.active, STATUS.reason = True, "compiled core loaded"
    STATUS.modules = list(COMPILED_MODULES)
    return STATUS


def status() -> AccelStatus:
    """This process's compiled-core status."""
    return STATUS


def require_active() -> None:
    """Fail loudly where the compiled core is required (SCHEDSIM_REQUIRE_ACCEL=1, e.g. in CI)."""
    if os.environ.get("SCHEDSIM_REQUIRE_ACCEL", "") not in ("", "0") and not STATUS.active:
        raise RuntimeError(f"schedsim: SCHEDSIM_REQUIRE_ACCEL is set but {STATUS.reason}")
