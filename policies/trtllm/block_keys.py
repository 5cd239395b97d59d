"""Block keys: the token content of each KV block, which is what TensorRT-LLM's radix tree is keyed by.

TensorRT-LLM keys a block by its tokens (`BlockKey`, one per block and position in the tree). A
request with token ids has them; a simulated request known only by its prompt length, or by
trace-given hashes of its full prompt blocks, gets stand-in token identities: every token of a
block whose hash the trace gives is (that hash, offset in the block), so equal hashes give equal
keys; every other prompt token is (request, position), unique to the request. Outputs are the
sampled token ids. Stand-ins are large integers far from any vocabulary, laid out so that the
tokens of one block are consecutive (a key is one `range`): equal content gives equal keys and
the common prefix of two keys is exactly what the tokens they stand for share. A key of stand-ins
only is kept as that `range` (hashed and compared without building its tokens: the radix tree
looks keys up every step); a key holding a known token id is a tuple. The two never hold the
same tokens (stand-ins lie above every id), so a range and a tuple are rightly never equal.

The full-block keys of a request are computed once and kept until the request finishes; a pause
that truncates the request's tokens drops the keys past the cut.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

from ..request import Request

BlockKey = Sequence[int]  # a block's tokens: a range of stand-ins, or a tuple of ids

STAND_IN_BASE: Final = 1 << 62  # above every vocabulary and every synthetic output id
_MASK: Final = (1 << 60) - 1


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
        """The (stand-in) ids of the request's known tokens at positions [start, end)."""
        prompt_len = request.prompt_len
        if end <= prompt_len:
            return self._prompt_tokens(request, start, end)
        outs = request.output_token_ids
        if start >= prompt_len:
            return tuple(outs[start - prompt_len : end - prompt_len])
        return tuple(self._prompt_tokens(request, start, prompt_len)) + tuple(outs[: end - prompt_len])

    def _prompt_tokens(self, request: Request, start: int, end: int) -> BlockKey:
        """Prompt positions [start, end), which lie inside one block or span whole blocks."""
        ids = request.prompt_token_ids
        if ids is not None:
            return tuple(ids[start:end])
        bs = self.tokens_per_block
        first, last = start // bs, (end - 1) // bs
        if first == last:  # inside one block: one range (every full-block key)
            base = self._block_base(request, first)
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
        """Extend `keys` to the first `stop` full prompt blocks of stand-ins, the ranges that
        `tokens` builds one call chain per block (a prompt's keys are made at its admission)."""
        bs = self.tokens_per_block
        given = request.prompt_block_hashes
        num_given = 0 if given is None else min(len(given), stop)
        for idx in range(len(keys), stop):
            if given is not None and idx < num_given:
                first = STAND_IN_BASE + _mix(given[idx])
            else:
                first = self._request_base(request.request_id) + idx * bs
            keys.append(range(first, first + bs))

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
