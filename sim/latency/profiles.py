"""Measured profiles in one tidy format: import Vidur-format CSVs, ship them compact, load them back.

Tidy tables (times in seconds):
- compute:   gpu, model, tp, op, num_tokens, time_s
- network:   node, collective, num_workers, size_bytes, time_s
- attention: gpu, model, tp, phase ("prefill"|"decode"), batch_size, chunk_tokens, kv_tokens,
             op, time_s
Vidur times are milliseconds; duplicate measurements of one grid point keep their median.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import pandas as pd

from .roofline import RooflineConfig, RooflineModel
from .specs import get_gpu_spec, get_model_spec, list_model_specs

COMPUTE_OPS = (
    "emb",
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
ATTENTION_OPS = (
    "attn_kv_cache_save",
    "attn_prefill",
    "attn_decode",
    "attn_input_reshape",
    "attn_output_reshape",
)
NETWORK_NODES = {"h100_dgx": "h100-sxm", "a100_dgx": "a100-80gb"}
TABLES = ("compute", "network", "attention")
_FILES = {  # the compute table is one file per model (compute_file)
    "network": "profile_network.csv.gz",
    "attention": "profile_attention.csv.gz",
}
COMPUTE_GLOB = "profile_compute*.csv.gz"
WHOLE_COMPUTE_FILE = "profile_compute.csv.gz"  # every model's compute rows in one file
KEYS_FILE = "profile_keys.json"  # Profiles.keys() of the tables beside it (a test checks it)


@dataclass
class Profiles:
    """The three tidy tables; any may be empty."""

    compute: pd.DataFrame
    network: pd.DataFrame
    attention: pd.DataFrame

    def keys(self) -> list[tuple[str, str, int]]:
        """(model, gpu, tp) triples with a compute profile."""
        rows = self.compute[["model", "gpu", "tp"]].drop_duplicates()
        return sorted((str(m), str(g), int(t)) for m, g, t in rows.itertuples(index=False))


def _model_for_vidur(name: str, where: Path) -> str:
    """Our spec name for a Vidur model folder such as meta-llama/Llama-2-7b-hf."""
    for spec_name in list_model_specs():
        spec = get_model_spec(spec_name)
        if spec.vidur_name and spec.vidur_name.lower() == name.lower():
            return spec_name
    raise ValueError(
        f"{where}: no shipped model spec for Vidur model {name!r}; add one to "
        f"models.json with vidur_name={name!r}"
    )


def _gpu_for_vidur(folder: str) -> str:
    return {"a100": "a100-80gb", "h100": "h100-sxm"}.get(folder.lower(), folder.lower())


def _stats(df: pd.DataFrame, ops: tuple[str, ...], keys: list[str], path: Path) -> pd.DataFrame:
    """Long format: one row per (keys, op) with the median of the per-run medians (ms -> s)."""
    missing = [k for k in keys if k not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    parts = []
    for op in ops:
        col = f"time_stats.{op}.median"
        if col not in df.columns:
            continue
        sub = df[keys + [col]].dropna(subset=[col])
        g = sub.groupby(keys, as_index=False).agg(time_s=(col, "median"))
        g["op"] = op
        parts.append(g)
    if not parts:
        raise ValueError(f"{path}: no time_stats.<op>.median column for any of {list(ops)}")
    out = pd.concat(parts, ignore_index=True)
    out["time_s"] *= 1e-3
    return out


def drop_impossible(df: pd.DataFrame, path: Path, slack: float = 2.0) -> pd.DataFrame:
    """Drop rows faster than the GPU's datasheet peaks allow (by `slack`x), with a warning: a
    misaligned column in a fork's CSV must not teach the table that a GEMM takes 2 us."""
    keep = pd.Series(True, index=df.index)
    peak = RooflineConfig(
        gemm_compute_eff=1.0,
        gemm_memory_eff=1.0,
        elementwise_memory_eff=1.0,
        kernel_overhead_us=0.0,
        gemm_overhead_us=0.0,
    )
    for (gpu, model, tp), sub in df.groupby(["gpu", "model", "tp"]):
        try:
            rl = RooflineModel(get_model_spec(model), get_gpu_spec(gpu), int(tp), peak)
        except KeyError:
            continue  # no datasheet for this GPU: nothing to check against
        floor = [rl.work_time(*rl.op_work(int(t))[op]) for t, op in zip(sub.num_tokens, sub.op, strict=True)]
        keep[sub.index] = sub.time_s.to_numpy() * slack >= floor
    if not keep.all():
        bad = df[~keep]
        warnings.warn(
            f"{path}: dropped {len(bad)} measurement(s) faster than the GPU's peak "
            f"allows (ops {sorted(bad.op.unique())}, tokens {int(bad.num_tokens.min())}"
            f"..{int(bad.num_tokens.max())})",
            stacklevel=2,
        )
    return df[keep].reset_index(drop=True)


def read_vidur_mlp(path: Path, gpu: str, model: str) -> pd.DataFrame:
    """One Vidur mlp.csv as tidy compute rows."""
    df = pd.read_csv(path)
    out = _stats(df, COMPUTE_OPS, ["num_tokens", "num_tensor_parallel_workers"], path)
    out = out.rename(columns={"num_tensor_parallel_workers": "tp"})
    out.insert(0, "model", model)
    out.insert(0, "gpu", gpu)
    return drop_impossible(out[["gpu", "model", "tp", "op", "num_tokens", "time_s"]], path)


def read_vidur_attention(path: Path, gpu: str, model: str) -> pd.DataFrame:
    """One Vidur attention.csv as tidy attention rows."""
    df = pd.read_csv(path)
    keys = ["num_tensor_parallel_workers", "is_prefill", "batch_size", "prefill_chunk_size", "kv_cache_size"]
    out = _stats(df, ATTENTION_OPS, keys, path)
    out = out.rename(
        columns={
            "num_tensor_parallel_workers": "tp",
            "prefill_chunk_size": "chunk_tokens",
            "kv_cache_size": "kv_tokens",
        }
    )
    out["phase"] = out.pop("is_prefill").map({True: "prefill", False: "decode"})
    out = out[
        ((out.phase == "prefill") & (out.op != "attn_decode"))
        | ((out.phase == "decode") & (out.op != "attn_prefill"))
    ]
    out.insert(0, "model", model)
    out.insert(0, "gpu", gpu)
    return out[
        ["gpu", "model", "tp", "phase", "batch_size", "chunk_tokens", "kv_tokens", "op", "time_s"]
    ].reset_index(drop=True)


def read_vidur_network(path: Path, node: str) -> pd.DataFrame:
    """One Vidur all_reduce.csv / send_recv.csv as tidy rows (median over repeated sizes)."""
    df = pd.read_csv(path)
    for col in ("collective", "num_workers", "size"):
        if col not in df.columns:
            raise ValueError(f"{path}: missing column {col!r}")
    coll = str(df["collective"].iloc[0])
    col = f"time_stats.{coll}.median"
    if col not in df.columns:
        raise ValueError(f"{path}: missing column {col!r}")
    if "devices_per_node" in df.columns:  # keep single-node runs: TP stays inside one node
        df = df[df["devices_per_node"] >= df["num_workers"]]
    g = df.groupby(["num_workers", "size"], as_index=False)[col].median()
    g = g.rename(columns={"size": "size_bytes", col: "time_s"})
    g["time_s"] *= 1e-3
    g.insert(0, "collective", coll)
    g.insert(0, "node", node)
    return g


def import_vidur(root: str | Path) -> Profiles:
    """Every Vidur-format profile under root (compute/<gpu>/<org>/<model>/, network/<node>/)."""
    root = Path(root)
    compute, attention, network = [], [], []
    for path in sorted(root.rglob("*.csv")):
        parts = path.relative_to(root).parts
        if "compute" in parts:
            i = parts.index("compute")
            if len(parts) - i != 5:
                raise ValueError(f"{path}: expected compute/<gpu>/<org>/<model>/<file>.csv")
            gpu, model = _gpu_for_vidur(parts[i + 1]), _model_for_vidur("/".join(parts[i + 2 : i + 4]), path)
            if path.name == "mlp.csv":
                compute.append(read_vidur_mlp(path, gpu, model))
            elif path.name == "attention.csv":
                attention.append(read_vidur_attention(path, gpu, model))
        elif "network" in parts and path.name in ("all_reduce.csv", "send_recv.csv"):
            network.append(read_vidur_network(path, path.parent.name))
    if not compute and not network:
        raise ValueError(f"{root}: no Vidur-format profiles found")

    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    return Profiles(cat(compute), cat(network), cat(attention))


def write_profiles(profiles: Profiles, out_dir: str | Path) -> list[Path]:
    """Write the tidy tables as compact gzip CSVs, the compute table one file per model (a run
    parses only its model's rows)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(COMPUTE_GLOB):
        stale.unlink()
    written = []
    for model, rows in _by_model(profiles.compute):
        path = out_dir / compute_file(model)
        rows.to_csv(path, index=False, float_format="%.4g")
        written.append(path)
    for attr, name in _FILES.items():
        df = getattr(profiles, attr)
        path = out_dir / name
        if df.empty:  # absent file = empty table
            path.unlink(missing_ok=True)
            continue
        df.to_csv(path, index=False, float_format="%.4g")
        written.append(path)
    keys = out_dir / KEYS_FILE  # what shipped_profile_keys reads (for the shipped folder)
    keys.write_text(
        "[\n" + ",\n".join(json.dumps(list(k)) for k in profiles.keys()) + "\n]\n"
        if not profiles.compute.empty
        else "[]\n"
    )
    written.append(keys)
    return written


def compute_file(model: str) -> str:
    """The file name of one model's compute rows."""
    if not model or any(c in model for c in "/\\") or model.startswith("."):
        raise ValueError(f"model name {model!r} cannot name a profile file")
    return f"profile_compute.{model}.csv.gz"


def _by_model(compute: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The compute rows of each model, in order of first appearance, rows in their order."""
    if compute.empty:
        return []
    return [(str(m), rows) for m, rows in compute.groupby("model", sort=False)]


def read_profiles(
    folder: str | Path, models: Iterable[str] | None = None, tables: Collection[str] = TABLES
) -> Profiles:
    """Tidy tables from a folder written by write_profiles: the compute rows of `models` (None:
    every model), and of `tables` only those named (the others empty). A single
    profile_compute.csv.gz holding every model is read too."""
    folder = Path(folder)
    unknown = sorted(set(tables) - set(TABLES))
    if unknown:
        raise ValueError(f"unknown profile table(s) {unknown}; known: {list(TABLES)}")
    frames = {
        attr: pd.read_csv(folder / name) if attr in tables and (folder / name).is_file() else pd.DataFrame()
        for attr, name in _FILES.items()
    }
    frames["compute"] = _read_compute(folder, models) if "compute" in tables else pd.DataFrame()
    return Profiles(**frames)


def _read_compute(folder: Path, models: Iterable[str] | None) -> pd.DataFrame:
    """The compute rows of `models` (None: all), from the per-model files and a whole-table file."""
    wanted = None if models is None else set(models)
    if wanted is None:
        paths = sorted(p for p in folder.glob(COMPUTE_GLOB) if p.name != WHOLE_COMPUTE_FILE)
    else:
        paths = [folder / compute_file(m) for m in sorted(wanted)]
    parts = [pd.read_csv(p) for p in paths if p.is_file()]
    whole = folder / WHOLE_COMPUTE_FILE
    if whole.is_file():
        df = pd.read_csv(whole)
        parts.append(df if wanted is None else df[df.model.isin(wanted)])
    if not parts:
        return pd.DataFrame()
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)


@lru_cache(maxsize=1)
def shipped_profile_keys() -> frozenset[tuple[str, str, int]]:
    """(model, gpu, tp) triples the shipped tables cover, without parsing them (~0.1 s a run)."""
    data = resources.files("schedsim.latency").joinpath("data").joinpath(KEYS_FILE)
    return frozenset((m, g, int(t)) for m, g, t in json.loads(data.read_text()))


@lru_cache(maxsize=1)
def shipped_profiles() -> Profiles:
    """The profiles shipped with schedsim (imported from Vidur; MIT, see data/LICENSES)."""
    return read_profiles(shipped_folder())


@lru_cache(maxsize=16)
def shipped_compute_profiles(models: tuple[str, ...], network: bool) -> Profiles:
    """The shipped compute rows of some models (and the network table when asked): what a run
    reads, a few thousand rows instead of every model's."""
    return read_profiles(shipped_folder(), models, ("compute", "network") if network else ("compute",))


def shipped_folder() -> Path:
    """The folder of the shipped profile tables."""
    return Path(str(resources.files("schedsim.latency").joinpath("data")))


def node_for_gpu(gpu: str) -> str | None:
    """The network profile measured on this GPU's NVLink node, if any."""
    for node, name in NETWORK_NODES.items():
        if name == gpu:
            return node
    return None
