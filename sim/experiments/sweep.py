"""Sweeps: a grid of runs on a process pool or Ray; resumable, one tidy parquet table.

A finished point is a record `runs/<key>.json` whose key hashes the resolved config, the content
of every file the run reads (trace, calibration files, CPU-cost file, plugin modules) and the
schedsim version and code: a resumed sweep reuses a record only when all of them are unchanged, and
reruns the point otherwise. A record that cannot be read is named and rerun. A point whose policy
stops where the engine it models itself fails (an `EngineFailure`) records the failure
(`engine_failure`, `engine_failure_step`, `engine_failure_message`) in place of its metrics; the
other points go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import itertools
import json
import multiprocessing
import sys
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from schedsim import __version__
from schedsim.experiments.compare import derived_metrics
from schedsim.experiments.sweep_ray import execute_ray
from schedsim.outputs.folder import WorkingFolder, write_atomic
from schedsim.policies import EngineFailure
from schedsim.run.signals import sigint_ignored
from schedsim.run.simulate import simulate
from schedsim.run.toml_config import ConfigError, coerce, merge, to_jsonable
from schedsim.run.workload import trace_options
from schedsim.traces import SHIPPED, load_workload, shipped_path
from tqdm import tqdm

RECORD_FIELDS = ("run_id", "key", "params", "config", "metrics")


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: how many of its points are recorded (a rerun resumes from them)."""

    def __init__(self, saved: int, total: int, out: Path) -> None:
        super().__init__(f"partial sweep: {saved}/{total} points saved in {out}/, rerun to resume")
        self.saved, self.total, self.out = saved, total, out


@dataclasses.dataclass(frozen=True)
class SweepRun:
    """One point of the grid: the knobs that vary, the resolved config and its stable id."""

    params: dict[str, Any]
    config: Any
    run_id: str


def _hash(data: Any) -> str:
    """A short stable hash of JSON data."""
    blob = json.dumps(to_jsonable(data), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def run_id(config: Any) -> str:
    """Hash of the resolved config, so a point is recognised whatever order the grid takes."""
    return _hash(config)


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{'policy_options.x': 1} → {'policy_options': {'x': 1}} so dotted grid keys reach nested fields."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def expand_grid(
    base: Any,
    grid: Mapping[str, Sequence[Any]],
    runs: Sequence[Mapping[str, Any]] = (),
    source: str = "sweep",
) -> list[SweepRun]:
    """Every explicit run (or just the base) times the Cartesian product of the grid, de-duplicated."""
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ConfigError(f"{source}: grid key {key!r} needs a non-empty list of values")
    keys = list(grid)
    out: dict[str, SweepRun] = {}
    base_data = to_jsonable(base)
    for extra in runs or [{}]:
        for combo in itertools.product(*(grid[k] for k in keys)):
            params = {**dict(extra), **dict(zip(keys, combo, strict=True))}
            data = coerce(type(base), merge(base_data, _nest(params)), source)
            try:
                config = type(base)(**data)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{source}: run {params}: {exc}") from None
            rid = run_id(config)
            out.setdefault(rid, SweepRun(params, config, rid))
    return list(out.values())


@functools.lru_cache(maxsize=4)
def _trace(name: str, options: tuple[tuple[str, Any], ...]) -> pd.DataFrame:
    """A worker loads each trace once, however many grid points replay it."""
    return load_workload(name, **dict(options))


def simulate_one(config: Any) -> dict[str, Any]:
    """Worker body (module level so process pools and Ray can pickle it): one run's metrics, or
    where the engine the policy models fails (a finding: the point's result, recorded and resumed
    like any other)."""
    trace = _trace(config.trace, tuple(sorted(trace_options(config).items())))
    try:
        result = simulate(config, workload=trace, progress=False)
    except EngineFailure as exc:
        return failure_metrics(exc)
    return derived_metrics(result.summary, result.requests)


def failure_metrics(exc: EngineFailure) -> dict[str, Any]:
    """A stopped point's row: the cause, the step and the whole report, in place of its metrics."""
    return {
        "engine_failure": exc.cause,
        "engine_failure_step": exc.step,
        "engine_failure_message": exc.report(),
    }


def input_files(config: Any) -> dict[str, Path]:
    """Every file a run reads besides schedsim itself, by role: the trace (a file or a shipped
    sample), the latency calibration (and the profiles folder it names), the CPU-cost file,
    plugin modules."""
    files: dict[str, Path] = {}
    trace = str(config.trace)
    if trace in SHIPPED:
        files["trace"] = shipped_path(trace)
    elif Path(trace).is_file():
        files["trace"] = Path(trace)
    if config.latency_calibration is not None:
        cal = Path(config.latency_calibration)
        files["latency_calibration"] = cal
        files.update(_profiles_of(cal))
    if config.cpu_cost_file is not None:
        files["cpu_cost_file"] = Path(config.cpu_cost_file)
    for module in config.plugins:
        origin = _module_file(module)
        if origin is not None:
            files[f"plugin {module}"] = origin
    return files


def _profiles_of(calibration: Path) -> dict[str, Path]:
    """The files of the profiles folder a calibration names (`calibrate --profile`), by role."""
    try:
        folder = json.loads(calibration.read_text()).get("profiles")
    except (OSError, ValueError, AttributeError):
        return {}  # the run reports the unreadable file; its digest marks it here
    if not isinstance(folder, str):
        return {}
    root = calibration.parent / folder
    return {f"profiles {p.relative_to(root)}": p for p in sorted(root.rglob("*")) if p.is_file()}


def _module_file(module: str) -> Path | None:
    """The source file of a plugin module (None when it cannot be found: the run reports it)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and Path(origin).is_file() else None


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes ('missing' when it cannot be read)."""
    h = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return "missing"
    return h.hexdigest()


SCHEDSIM_PACKAGES = ("schedsim.policies", "schedsim.traces", "schedsim.backend", "schedsim")
BUILT_PARTS = frozenset({"__pycache__", "_compiled"})  # folders of files built from the sources


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 of schedsim's own files (code and shipped data, by their names in the package): an
    edit between two releases changes it where the version string stays the same."""
    seen: set[Path] = set()
    named: list[tuple[str, Path]] = []
    for package in SCHEDSIM_PACKAGES:  # the subpackages first: in a wheel they lie inside schedsim/
        spec = importlib.util.find_spec(package)
        for root in map(Path, (spec and spec.submodule_search_locations) or ()):
            for path in root.rglob("*"):
                rel = path.relative_to(root)
                if path.is_file() and not BUILT_PARTS.intersection(rel.parts) and path.suffix != ".pyc":
                    if path.resolve() not in seen:
                        seen.add(path.resolve())
                        named.append((f"{package.replace('.', '/')}/{rel.as_posix()}", path))
    h = hashlib.sha256()
    for name, path in sorted(named):
        h.update(f"{name}\0{file_digest(path)}\0".encode())
    return h.hexdigest()


def run_keys(runs: Sequence[SweepRun]) -> list[dict[str, Any]]:
    """Each run's resume key: its config hash, its input files' digests, the schedsim version and
    code (each file is read once, however many points share it)."""
    digests: dict[Path, str] = {}
    keys = []
    for run in runs:
        inputs = {}
        for role, path in input_files(run.config).items():
            if path not in digests:
                digests[path] = file_digest(path)
            inputs[role] = digests[path]
        keys.append({"config": run.run_id, "inputs": inputs, "schedsim": __version__, "code": code_digest()})
    return keys


def record_ids(runs: Sequence[SweepRun]) -> list[str]:
    """Each run's record id: its row's `run_id` in the results table."""
    return [_hash(k) for k in run_keys(runs)]


def read_record(path: Path) -> dict[str, Any]:
    """A record file, checked whole (ValueError naming the file and what is wrong)."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: damaged record ({exc})") from None
    if isinstance(rec, dict) and "key" not in rec and "run_id" in rec:
        raise ValueError(f"{path}: a record without a resume key (an older schedsim's)")
    if not isinstance(rec, dict) or any(f not in rec for f in RECORD_FIELDS):
        raise ValueError(f"{path}: damaged record (needs {', '.join(RECORD_FIELDS)})")
    if rec["run_id"] != path.stem or _hash(rec["key"]) != rec["run_id"]:
        raise ValueError(f"{path}: damaged record (its key does not hash to its name)")
    if not isinstance(rec["metrics"], dict) or not isinstance(rec["params"], dict):
        raise ValueError(f"{path}: damaged record (metrics and params must be tables)")
    return rec


def _record(out: Path, run: SweepRun, key: Mapping[str, Any], metrics: Mapping[str, Any]) -> None:
    """Persist one finished run atomically; its presence is what makes the sweep resumable."""
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    rid = _hash(key)
    rec = {
        "run_id": rid,
        "key": key,
        "params": to_jsonable(run.params),
        "config": to_jsonable(run.config),
        "metrics": metrics,
    }
    write_atomic(runs_dir / f"{rid}.json", json.dumps(rec, sort_keys=True, default=str).encode())


def _why_rerun(key: Mapping[str, Any], old: Mapping[str, Any]) -> str:
    """What changed between a point's recorded key and its key now."""
    if old.get("schedsim") != key["schedsim"]:
        return f"recorded by schedsim {old.get('schedsim')}, this is {key['schedsim']}"
    if old.get("code") != key["code"]:
        return "schedsim's code or shipped data changed since it was recorded"
    inputs, before = key["inputs"], old.get("inputs", {})
    changed = sorted(p for p in {*inputs, *before} if inputs.get(p) != before.get(p))
    return "changed since it was recorded: " + ", ".join(changed[:3]) + (" ..." if len(changed) > 3 else "")


def _stderr(message: str) -> None:
    """Where a sweep says which points it reruns and why (above the progress bar)."""
    tqdm.write(f"schedsim sweep: {message}", file=sys.stderr)


def _simulate_indexed(item: tuple[int, Any]) -> tuple[int, dict[str, Any]]:
    """Pool body: (index, metrics) so results can arrive in any order."""
    index, config = item
    return index, simulate_one(config)


def _execute(
    pending: Sequence[SweepRun], engine: str, workers: int
) -> Generator[tuple[SweepRun, dict[str, Any]], None, None]:
    """Yield (run, metrics) as runs finish, on the chosen engine; on Ctrl-C the pool's workers
    are stopped at once (not after their current run)."""
    if engine == "ray":
        yield from execute_ray(simulate_one, pending, workers)
    elif workers <= 1 or len(pending) <= 1:
        for run in pending:
            yield run, simulate_one(run.config)
    else:
        with sigint_ignored():  # the workers start with Ctrl-C ignored: it is the parent's to handle
            pool = multiprocessing.get_context().Pool(min(workers, len(pending)))
        try:
            for index, metrics in pool.imap_unordered(
                _simulate_indexed, enumerate(r.config for r in pending)
            ):
                yield pending[index], metrics
            pool.close()
        finally:
            pool.terminate()
            pool.join()


def run_sweep(
    runs: Sequence[SweepRun],
    out: Path,
    engine: str = "process",
    workers: int = 2,
    progress: bool = True,
    notify: Callable[[str], None] = _stderr,
) -> pd.DataFrame:
    """Run the points not recorded under `out/runs/` with the same key, then assemble
    out/results.parquet, under the folder's lock; `out` is marked complete once every point is in.
    Ctrl-C raises SweepInterrupted once the finished points are recorded."""
    folder = WorkingFolder(out, keep=("runs",))
    with folder as path:
        table = execute_sweep(runs, path, engine, workers, progress, notify)
        folder.complete()
    return table


def execute_sweep(
    runs: Sequence[SweepRun],
    out: Path,
    engine: str = "process",
    workers: int = 2,
    progress: bool = True,
    notify: Callable[[str], None] = _stderr,
) -> pd.DataFrame:
    """The sweep itself, written in place into `out`: the caller holds the folder (`WorkingFolder`)."""
    keys = run_keys(runs)
    ids = [_hash(k) for k in keys]
    recorded = _recorded(out / "runs", notify)
    pending = [(r, k) for r, k, i in zip(runs, keys, ids, strict=True) if i not in recorded]
    by_config = {rec["key"].get("config"): rec for rec in recorded.values()}
    for run, key in pending:
        if run.run_id in by_config:
            notify(
                f"rerunning {run.params or 'the base run'}: {_why_rerun(key, by_config[run.run_id]['key'])}"
            )
    bar = tqdm(
        total=len(runs), initial=len(runs) - len(pending), desc="sweep", unit="run", disable=not progress
    )
    saved = len(runs) - len(pending)
    key_of = {r.run_id: k for r, k in pending}
    try:
        with contextlib.closing(_execute([r for r, _ in pending], engine, workers)) as finished:
            for run, metrics in finished:  # closing: the pool stops whatever ends the loop
                _record(out, run, key_of[run.run_id], metrics)
                if run.run_id in by_config:  # the record it replaces: other inputs, never read again
                    (out / "runs" / f"{by_config[run.run_id]['run_id']}.json").unlink(missing_ok=True)
                saved += 1
                bar.update(1)
    except KeyboardInterrupt:
        bar.close()
        raise SweepInterrupted(saved, len(runs), out) from None
    bar.close()
    table = collect(out, set(ids))
    table.to_parquet(out / "results.parquet", index=False)
    return table


def _recorded(runs_dir: Path, notify: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Every readable record by its id; a damaged one is named, removed and its point rerun."""
    out = {}
    for path in sorted(runs_dir.glob("*.json")):
        try:
            out[path.stem] = read_record(path)
        except ValueError as exc:
            notify(f"{exc}; rerunning that point")
            path.unlink(missing_ok=True)
    return out


def collect(out: Path, ids: set[str] | None = None) -> pd.DataFrame:
    """One tidy row per recorded run: run_id, the swept knobs, then every scalar metric."""
    rows = []
    for path in sorted((out / "runs").glob("*.json")):
        if ids is not None and path.stem not in ids:
            continue
        rec = read_record(path)
        params = {k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in rec["params"].items()}
        rows.append(
            {"run_id": rec["run_id"], "policy": rec["config"].get("policy"), **params, **rec["metrics"]}
        )
    return pd.DataFrame(rows)
