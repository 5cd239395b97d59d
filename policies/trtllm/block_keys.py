"""Block keys: the token content of each KV block, which is what TensorRT-LLM's radix tree is keyed by.

TensorRT-LLM keys a block by its tokens (`BlockKey`, one per block and position in the tree). A
request with token ids has them; a simulated request known only by its prompt length, or by
trace-given hashes of its full prompt blocks, gets stand-in token identities: every token of a
block whose hash the trace gives is (that hash, offset in the block), so equal hashes give equal
keys; every other prompt token is (request, position), unique to the request. Outputs are the
sampled token ids. Stand-ins are integers above every vocabulary, laid out so that the tokens of
one block are consecutive: a full block of stand-ins is keyed by its first stand-in alone (an
`int`, which the radix tree looks up every step: hashed and compared as one machine-sized
integer), a partial one by the `range` of its stand-ins, and a block holding a known token id by
the tuple of its tokens. Equal content gives equal keys, the three forms never hold the same tokens
(lengths differ, stand-ins lie above every id), and `key_tokens` gives any key's tokens back.

The full-block keys of a request are computed once and kept until the request finishes; a pause
that truncates the request's tokens drops the keys past the cut.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Sequence
from typing import Final

from ..request import Request

BlockKey = int | Sequence[int]  # a full block's first stand-in, a range of stand-ins, or a tuple of ids

# above every vocabulary and every synthetic output id; base + mask + a prompt's length stays
# below 2**62, a machine-sized integer in the compiled core
STAND_IN_BASE: Final = 1 << 61
_MASK: Final = (1 << 60) - 1


def key_tokens(key: BlockKey, tokens_per_block: int) -> Sequence[int]:
    """The tokens a key stands for (a full block of stand-ins is keyed by its first)."""
    if isinstance(key, int):
        return range(key, key + tokens_per_block)
    return key


def key_len(key: BlockKey, tokens_per_block: int) -> int:
    """Number of tokens a key stands for."""
    return tokens_per_block if isinstance(key, int) else len(key)


def first_token(key: BlockKey) -> int:
    """A non-empty key's first token."""
    return key if isinstance(key, int) else key[0]


def _mix(value: int) -> int:
    """splitmix64's finaliser: spreads trace hashes and salts over 60 bits."""
    z = (value + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & _MASK


def _request_base(request_id: str) -> int:
    """First stand-in of a request's own prompt tokens (process-independent)."""
    digest = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
    return STAND_IN_BASE + (int.from_bytes(digest, "little") & _MASK)


class BlockKeys:
    """Block keys of live requests at one block size; full-block keys are cached per request."""

    def __init__(self, tokens_per_block: int) -> None:
        """Keys are chopped at `tokens_per_block`, the KV block size."""
        if tokens_per_block < 1:
            raise ValueError(f"BlockKeys.tokens_per_block must be >= 1, got {tokens_per_block}")
        self.tokens_per_block = tokens_per_block
        self._full: dict[str, list[BlockKey]] = {}
        self._bases: dict[str, int] = {}

    def tokens(self, request: Request, start: int, end: int) -> BlockKey:
        """The key of the request's known tokens at positions [start, end) (a span of several
        blocks: their tokens as a tuple)."""
        prompt_len = request.prompt_len
        if end <= prompt_len:
            return self._prompt_tokens(request, start, end)
        outs = request.output_token_ids
        if start >= prompt_len:
            return tuple(outs[start - prompt_len : end - prompt_len])
        head = key_tokens(self._prompt_tokens(request, start, prompt_len), self.tokens_per_block)
        return tuple(head) + tuple(outs[: end - prompt_len])

    def _prompt_tokens(self, request: Request, start: int, end: int) -> BlockKey:
        """Prompt positions [start, end), which lie inside one block or span whole blocks."""
        ids = request.prompt_token_ids
        if ids is not None:
            return tuple(ids[start:end])
        bs = self.tokens_per_block
        first, last = start // bs, (end - 1) // bs
        if first == last:  # inside one block: its first stand-in for a whole block, else a range
            base = self._block_base(request, first)
            if end - start == bs:
                return base + start
            return range(base + start, base + end)
        out: list[int] = []
        for idx in range(first, last + 1):
            base = self._block_base(request, idx)
            out.extend(range(base + max(start, idx * bs), base + min(end, (idx + 1) * bs)))
        return tuple(out)

    def _block_base(self, request: Request, idx: int) -> int:
        """The stand-in of position 0 for block `idx`'s tokens: its trace hash's for a full prompt block
        the trace gives, else the request's own."""
        bs = self.tokens_per_block
        given = request.prompt_block_hashes
        if given is not None and idx < len(given) and idx < request.prompt_len // bs:
            return STAND_IN_BASE + _mix(given[idx]) - idx * bs
        return self._request_base(request.request_id)

    def _request_base(self, request_id: str) -> int:
        """Cached per live request (a blake2b digest per block would dominate)."""
        base = self._bases.get(request_id)
        if base is None:
            base = self._bases[request_id] = _request_base(request_id)
        return base

    def full_keys(self, request: Request, num_tokens: int) -> list[BlockKey]:
        """Keys of the full blocks among the first `num_tokens` known tokens (a cached list: do not keep)."""
        bs = self.tokens_per_block
        n = min(num_tokens, request.num_tokens) // bs
        keys = self._full.get(request.request_id)
        if keys is None:
            keys = self._full[request.request_id] = []
        if request.prompt_token_ids is None:
            self._stand_in_keys(request, keys, min(n, request.prompt_len // bs))
        for idx in range(len(keys), n):
            keys.append(self.tokens(request, idx * bs, (idx + 1) * bs))
        return keys if len(keys) == n else keys[:n]

    def _stand_in_keys(self, request: Request, keys: list[BlockKey], stop: int) -> None:
        """Extend `keys` to the first `stop` full prompt blocks of stand-ins, the keys that
        `tokens` builds one call chain per block (a prompt's keys are made at its admission)."""
        bs = self.tokens_per_block
        given = request.prompt_block_hashes
        num_given = 0 if given is None else min(len(given), stop)
        start = len(keys)
        if start >= stop:
            return
        own = self._request_base(request.request_id)
        for idx in range(start, stop):
            if given is not None and idx < num_given:
                keys.append(STAND_IN_BASE + _mix(given[idx]))
            else:
                keys.append(own + idx * bs)

    def private_root(self, request: Request) -> int | None:
        """The key of the request's first block when only its own keys reach its blocks (no token
        ids, no trace hashes: every prompt key is a stand-in of its own, every output block hangs
        below them) and that block was full at every store (a prompt longer than one block), else
        None."""
        if request.prompt_token_ids is not None or request.prompt_block_hashes:
            return None
        if request.prompt_len <= self.tokens_per_block:
            return None
        return self._request_base(request.request_id)

    def first_key_only(self, request: Request, stored_roots: Container[BlockKey]) -> list[BlockKey] | None:
        """[its first key] for a request that only its own keys reach with none of its blocks
        stored (`stored_roots`: the tree's first-level keys): every walk over its keys stops at the
        first, so the rest need not be built; else None."""
        root = self.private_root(request)
        if root is None or root in stored_roots:
            return None
        return [root]

    def keys(self, request: Request, num_tokens: int) -> list[BlockKey]:
        """chopVectorIntoBlocks with partial blocks allowed: full keys, then the partial tail."""
        bs = self.tokens_per_block
        keys = list(self.full_keys(request, num_tokens))
        tail = num_tokens % bs
        if tail:
            start = num_tokens - tail
            keys.append(self.tokens(request, start, num_tokens))
        return keys

    def truncate(self, request_id: str, num_tokens: int) -> None:
        """The request's tokens were cut to `num_tokens` (a pause): forget keys past the cut."""
        keys = self._full.get(request_id)
        if keys is not None:
            del keys[num_tokens // self.tokens_per_block :]

    def drop(self, request_id: str) -> None:
        """The request finished: its keys are not needed any more."""
        self._full.pop(request_id, None)
        self._bases.pop(request_id, None)
