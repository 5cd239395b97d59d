"""Turn arrival events into request rows: single requests and multi-turn sessions, with hashes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .prefix import HASH_SEED, mix, mix_array
from .spec import ClassSpec, WorkloadSpec

_SYS, _USER, _REPLY, _BODY = 1, 2, 3, 4


class PromptHasher:
    """Walks prompts segment by segment, giving a value at every full block end.

    A segment is (content key, length); equal keys mean equal content. The value at block end
    e is mix(mix(chain, key), e - segment start), where chain names all earlier segments of the
    prompt, so two prompts get equal values exactly where their token prefixes are equal. All
    values of all prompts are computed in one vectorised pass at the end.
    """

    def __init__(self, block: int) -> None:
        """One hasher per class: values of all its prompts are computed together."""
        self.block = block
        self.heads: list[int] = []
        self.rels: list[np.ndarray] = []
        self.count = 0
        self.begin = 0
        self.new_prompt()

    def new_prompt(self) -> None:
        """Start a fresh token sequence (a new session or a single request)."""
        self.chain, self.pos, self.begin = HASH_SEED, 0, self.count

    def extend(self, key: int, length: int) -> None:
        """Append one segment of `length` tokens with content `key`."""
        if length <= 0:
            return
        start, end = self.pos, self.pos + length
        head = mix(self.chain, key)
        first = (start // self.block + 1) * self.block
        rel = np.arange(first, end + 1, self.block, dtype=np.int64) - start
        if rel.size:
            self.heads.append(head)
            self.rels.append(rel)
            self.count += rel.size
        self.chain, self.pos = mix(head, length), end

    def mark(self) -> tuple[int, int]:
        """The slice of values covering the current prompt's full blocks so far."""
        return self.begin, self.count

    def values(self) -> np.ndarray:
        """Every value, in the order the segments were added."""
        if not self.rels:
            return np.empty(0, dtype=np.int64)
        heads = np.repeat(np.array(self.heads, dtype=np.uint64), [r.size for r in self.rels])
        return mix_array(heads, np.concatenate(self.rels))


def _tuples(hasher: PromptHasher, marks: list[tuple[int, int]]) -> np.ndarray:
    """Materialise each request's hash tuple from its slice."""
    values = hasher.values().tolist()
    out = np.empty(len(marks), dtype=object)
    for i, (a, b) in enumerate(marks):
        out[i] = tuple(values[a:b])
    return out


def _key(kind: int, *parts: int) -> int:
    """Content keys for segments (system prompt, user message, reply, unique body)."""
    k = kind
    for p in parts:
        k = mix(k, p)
    return k


def _single(
    c: ClassSpec, ci: int, ev: np.ndarray, t: np.ndarray, rng: np.random.Generator, block: int
) -> dict[str, np.ndarray]:
    """One request per event; the system prompt (if any) is the only shared part."""
    m = len(ev)
    body = c.prompt.sample(m, rng)
    out = c.output.sample(m, rng)
    sys_id = rng.integers(c.system_prompts, size=m)
    cols = {
        "event": ev,
        "turn_i": np.zeros(m, np.int64),
        "arrival_time": t[ev],
        "prompt_tokens": body + c.system_prompt_tokens,
        "output_tokens": out,
    }
    if c.shares_prefixes:
        h = PromptHasher(block)
        marks = []
        for i in range(m):
            h.new_prompt()
            h.extend(_key(_SYS, ci, int(sys_id[i])), c.system_prompt_tokens)
            h.extend(_key(_BODY, ci, int(ev[i])), int(body[i]))
            marks.append(h.mark())
        cols["prompt_block_hashes"] = _tuples(h, marks)
    return cols


def _sessions(
    c: ClassSpec, ci: int, ev: np.ndarray, t: np.ndarray, rng: np.random.Generator, block: int
) -> dict[str, np.ndarray]:
    """Sessions: turn j's prompt = system + all earlier (user, reply) pairs + user message j."""
    turns = c.turns.sample(len(ev), rng)  # type: ignore[union-attr]
    total = int(turns.sum())
    user = c.prompt.sample(total, rng)
    reply = c.output.sample(total, rng)
    gaps = rng.exponential(c.think_time_s, size=total) if c.think_time_s > 0 else np.zeros(total)
    sys_id = rng.integers(c.system_prompts, size=len(ev))
    owner = np.repeat(np.arange(len(ev)), turns)
    first = np.concatenate([[0], np.cumsum(turns)[:-1]])
    turn_i = np.arange(total) - first[owner]
    gaps[first] = 0.0
    arrival = t[ev][owner] + _grouped_cumsum(gaps, first, owner)
    history = _grouped_cumsum(user + reply, first, owner) - (user + reply)
    h = PromptHasher(block)
    marks = []
    for s in range(len(ev)):
        h.new_prompt()
        h.extend(_key(_SYS, ci, int(sys_id[s])), c.system_prompt_tokens)
        for r in range(first[s], first[s] + turns[s]):
            h.extend(_key(_USER, ci, int(ev[s]), int(turn_i[r])), int(user[r]))
            marks.append(h.mark())
            h.extend(_key(_REPLY, ci, int(ev[s]), int(turn_i[r])), int(reply[r]))
    hashes = _tuples(h, marks)
    return {
        "event": ev[owner],
        "turn_i": turn_i,
        "arrival_time": arrival,
        "prompt_tokens": c.system_prompt_tokens + history + user,
        "output_tokens": reply,
        "prompt_block_hashes": hashes,
    }


def _grouped_cumsum(x: np.ndarray, first: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Cumulative sums restarting at each session's first turn."""
    cs = np.cumsum(x)
    base = cs[first] - x[first]
    out: np.ndarray = cs - base[owner]
    return out


def build_requests(spec: WorkloadSpec, t: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
    """Rows for all events, sorted by arrival (stable), with the optional columns in use."""
    w = np.array([c.weight for c in spec.classes], dtype=float)
    cls = rng.choice(len(spec.classes), size=len(t), p=w / w.sum())
    parts = []
    for ci, c in enumerate(spec.classes):
        ev = np.flatnonzero(cls == ci)
        make = _sessions if c.turns is not None else _single
        cols = make(c, ci, ev, t, rng, spec.block_size)
        parts.append(_frame(c, cols))
    df = pd.concat(parts, ignore_index=True)
    if "prompt_block_hashes" in df.columns:
        df["prompt_block_hashes"] = [h if isinstance(h, tuple) else None for h in df["prompt_block_hashes"]]
    df = df.sort_values(["arrival_time", "_event", "turn_tmp"], kind="stable").reset_index(drop=True)
    df = df.drop(columns=["_event", "turn_tmp"])
    return _prune(df, spec)


def _strings(
    prefix: str, numbers: np.ndarray, suffix: tuple[str, np.ndarray] | None = None
) -> pd.api.extensions.ExtensionArray:
    """'<prefix><n>[<sep><m>]' ids built in Arrow (a million ids in well under a second)."""
    parts = [prefix, pa.array(numbers).cast(pa.string())]
    if suffix is not None:
        parts += [suffix[0], pa.array(suffix[1]).cast(pa.string())]
    return pd.array(pc.binary_join_element_wise(*parts, ""), dtype="string[pyarrow]")


def _nullable(value: int | None, n: int) -> pd.arrays.IntegerArray:
    """A constant Int64 column without building a Python list."""
    return pd.arrays.IntegerArray(np.full(n, value or 0, dtype=np.int64), np.full(n, value is None))


def _frame(c: ClassSpec, cols: dict[str, np.ndarray]) -> pd.DataFrame:
    """Attach ids and per-class flags."""
    ev, turn_i = cols.pop("event"), cols.pop("turn_i")
    n = len(ev)
    df = pd.DataFrame(cols)
    if c.turns is not None:
        df.insert(0, "request_id", _strings(f"{c.name}-s", ev, ("-t", turn_i)))
        df["session_id"], df["turn"] = _strings(f"{c.name}-s", ev), turn_i
    else:
        df.insert(0, "request_id", _strings(f"{c.name}-", ev))
    df["structured_output"] = np.full(n, c.structured_output)
    df["priority"] = np.full(n, c.priority, dtype=np.int64)
    df["lora_id"] = _nullable(c.lora_id, n)
    df["max_tokens"] = _nullable(c.max_tokens, n)
    df["request_class"] = pd.array(pa.repeat(c.name, n), dtype="string[pyarrow]")
    df["_event"], df["turn_tmp"] = ev, turn_i
    return df


def _prune(df: pd.DataFrame, spec: WorkloadSpec) -> pd.DataFrame:
    """Drop optional columns no class uses, so simple workloads stay simple."""
    classes = spec.classes
    drop = []
    if not any(c.shares_prefixes for c in classes):
        drop.append("prompt_block_hashes")
    if not any(c.turns is not None for c in classes):
        drop += ["session_id", "turn"]
    if not any(c.structured_output for c in classes):
        drop.append("structured_output")
    if not any(c.priority for c in classes):
        drop.append("priority")
    if all(c.lora_id is None for c in classes):
        drop.append("lora_id")
    if all(c.max_tokens is None for c in classes):
        drop.append("max_tokens")
    return df.drop(columns=[d for d in drop if d in df.columns])
