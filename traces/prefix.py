"""Prefix-sharing identities: re-blocking stored hashes to the simulator's block size.

Stored `prompt_block_hashes` follow Mooncake's convention: entry j identifies the content of
tokens [j*S, (j+1)*S) of the prompt (the last entry may cover a partial block), and two
requests share block j exactly when entries 0..j are all equal. The simulator wants one value
per *full* block of its own size T, equal between two requests exactly when their prompts share
that whole prefix. We chain the stored entries (c_j = mix(c_{j-1}, h_j)) so that c_j names the
whole prefix through block j, and give target block i (tokens [i*T, (i+1)*T)) the value
mix(c_j, (i+1)*T) with j the source block holding its last token. Only the prompt's own full
target blocks get values, so a T-block is shared iff its whole source block chain is shared and
it lies within both prompts' full blocks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import TraceError
from .schema import ATTR_PREFIX_BLOCK_SIZE, ATTR_SOURCE

_M = (1 << 64) - 1
_GOLD = 0x9E3779B97F4A7C15
HASH_SEED = 0x5CED5CED


def mix(a: int, b: int) -> int:
    """SplitMix64 finaliser of (a, b): deterministic across runs (unlike hash() of str)."""
    x = (a ^ ((b * _GOLD) & _M)) & _M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M
    return (x ^ (x >> 31)) >> 1


def mix_array(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Vectorised `mix`; uint64 arithmetic wraps exactly like the masked Python version."""
    a = a.astype(np.uint64)
    x = a ^ (b.astype(np.uint64) * np.uint64(_GOLD))
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = ((x ^ (x >> np.uint64(31))) >> np.uint64(1)).astype(np.int64)
    return out


def chain(hashes: tuple[int, ...]) -> np.ndarray:
    """c_j names the prefix through block j: equal iff all entries 0..j are equal."""
    out = np.empty(len(hashes), dtype=np.int64)
    c = HASH_SEED
    for j, h in enumerate(hashes):
        c = mix(c, h & _M)
        out[j] = c
    return out


def reblock_array(hashes: tuple[int, ...], prompt_tokens: int, source: int, target: int) -> np.ndarray:
    """One request's values at block size `target` (see the module docstring), as int64."""
    n = prompt_tokens // target
    ends = np.arange(1, n + 1, dtype=np.int64) * target
    j = (ends - 1) // source
    j = j[j < len(hashes)]
    if j.size == 0:
        return np.empty(0, dtype=np.int64)
    return mix_array(chain(hashes)[j], ends[: j.size])


def reblock(hashes: tuple[int, ...], prompt_tokens: int, source: int, target: int) -> tuple[int, ...]:
    """Tuple form of `reblock_array`, as the policies' Request wants it."""
    return tuple(reblock_array(hashes, prompt_tokens, source, target).tolist())


def _source_size(workload: pd.DataFrame) -> int | None:
    """The stored hashes' block size; an error if hashes exist without one."""
    if "prompt_block_hashes" not in workload.columns:
        return None
    source = workload.attrs.get(ATTR_PREFIX_BLOCK_SIZE)
    if source is None and workload["prompt_block_hashes"].notna().any():
        raise TraceError(
            f"prompt_block_hashes without attrs[{ATTR_PREFIX_BLOCK_SIZE!r}]",
            str(workload.attrs.get(ATTR_SOURCE, "<workload>")),
            None,
            "prompt_block_hashes",
        )
    return None if source is None else int(source)


def _arrays(workload: pd.DataFrame, block_size: int) -> list[np.ndarray | None]:
    """Per request, the re-blocked values as arrays (None: no prefix information)."""
    if block_size < 1:
        raise TraceError(f"block_size must be >= 1, got {block_size}", field="block_size")
    source = _source_size(workload)
    if source is None:
        return [None] * len(workload)
    prompts = workload["prompt_tokens"].to_numpy(dtype=np.int64)
    return [
        None if h is None else reblock_array(tuple(h), int(p), source, block_size)
        for h, p in zip(workload["prompt_block_hashes"].tolist(), prompts, strict=True)
    ]


def block_hashes_at(workload: pd.DataFrame, block_size: int) -> list[tuple[int, ...] | None]:
    """Per request, prefix-chained hashes of its full prompt blocks of `block_size` tokens.

    None means the request carries no prefix information (all its blocks are unique). A tuple
    may be shorter than prompt_tokens // block_size when the source hashes end early; blocks
    past its end are unique to the request.
    """
    return [None if a is None else tuple(a.tolist()) for a in _arrays(workload, block_size)]


def prefix_sharing(workload: pd.DataFrame, block_size: int = 16) -> dict[str, float]:
    """Share of prompt tokens an unbounded prefix cache could serve, replaying in arrival order.

    Values are prefix-chained, so a block is a hit exactly when an earlier request produced
    the same value; one np.unique over all values finds every first occurrence.
    """
    arrays = [a for a in _arrays(workload, block_size) if a is not None and a.size]
    prompt = int(workload["prompt_tokens"].sum()) if len(workload) else 0
    hit = 0
    if arrays:
        values = np.concatenate(arrays)
        owner = np.repeat(np.arange(len(arrays)), [a.size for a in arrays])
        _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        hit = int((owner[first][inverse] < owner).sum())
    total = sum(a.size for a in arrays)
    return {
        "cacheable_tokens": float(hit * block_size),
        "prefix_sharing_ratio": hit * block_size / prompt if prompt else 0.0,
        "blocks_with_hashes": float(total),
    }
