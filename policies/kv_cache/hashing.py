"""Chained content hashes of full KV blocks, for requests with token ids or only prompt lengths.

A block's hash covers its tokens and its parent's hash, so equal hashes mean equal prefixes (as
vLLM's block hasher); a prompt block whose content is known only to its own request is named
by (request, index) instead, which identifies its prefix as well: the request's salt (60 bits of
a digest of its id) plus the index, an addition the compiled core does natively; so is every block
after it (`private_from`), whose chained hash would be unique to the request too. Two requests'
names meet only if their salts lie closer than a prompt's block count, which 60 random bits make
as unlikely as a hash collision. Hashes are computed lazily, only up to the blocks a caller needs,
and kept in `request.block_hashes` until the request finishes.
"""

from __future__ import annotations

import hashlib
from typing import Final

from ..request import Request

NONE_HASH: Final = 0x5EED_0F_C0FFEE  # parent of the first block
_GIVEN_TAG: Final = 0x7A62  # marks a prompt block identified by a trace-given hash
_SALT_MASK: Final = (1 << 60) - 1  # a salt plus any block index stays below 2**62 (a native integer)


def _request_salt(request_id: str) -> int:
    """A process-independent integer for a request id (str hashes are randomised per process)."""
    digest = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _SALT_MASK


def _block_hash(request: Request, idx: int, parent: int, block_size: int) -> int:
    """Hash of full block `idx` given its parent's hash, for a block before `private_from`: its
    tokens are known, or the trace gives its hash, or it holds outputs after such a prompt."""
    start = idx * block_size
    end = start + block_size
    prompt_len = request.prompt_len
    ids = request.prompt_token_ids
    if ids is not None:
        if end <= prompt_len:
            return hash((parent, tuple(ids[start:end])))
        outs = request.output_token_ids
        if start >= prompt_len:
            return hash((parent, tuple(outs[start - prompt_len : end - prompt_len])))
        return hash((parent, tuple(ids[start:]) + tuple(outs[: end - prompt_len])))
    if start < prompt_len:  # before private_from: a whole prompt block with a given hash
        given = request.prompt_block_hashes
        assert given is not None and end <= prompt_len, "a block before private_from has known content"
        return hash((parent, _GIVEN_TAG, given[idx]))
    outs = request.output_token_ids
    return hash((parent, tuple(outs[start - prompt_len : end - prompt_len])))


NEVER_PRIVATE: Final = 4611686018427387904  # 2^62: the private_from of requests others may share


def private_from(request: Request, block_size: int) -> int:
    """Index of the first block whose content only this request can know: its hash, and every
    later one (chained on it), is unique to the request (`_unique_hash` or a descendant), so
    only the request itself can ever hit it. NEVER_PRIVATE where every block may be shared."""
    if request.prompt_token_ids is not None:
        return NEVER_PRIVATE
    full = request.prompt_len // block_size
    given = request.prompt_block_hashes
    n_given = min(len(given), full) if given is not None else 0
    if n_given == full and request.prompt_len % block_size == 0:
        return NEVER_PRIVATE  # given hashes cover the prompt: outputs chain on a shared prefix
    return n_given


def ensure_block_hashes(request: Request, num_blocks: int, block_size: int) -> list[int]:
    """Extend `request.block_hashes` to at least `num_blocks` full blocks of known tokens."""
    hashes = request.block_hashes
    have = len(hashes)
    if have >= num_blocks:
        return hashes
    limit = min(num_blocks, request.num_tokens // block_size)
    # content hashes up to the first block only this request can know; from there on every block
    # (chained on that one) is unique to the request, and named by (request, index) in one pass
    split = min(limit, private_from(request, block_size))
    parent = hashes[-1] if hashes else NONE_HASH
    for idx in range(have, split):
        parent = _block_hash(request, idx, parent, block_size)
        hashes.append(parent)
    start = max(have, split)
    if start < limit:
        salt = request.block_hash_salt
        if salt < 0:  # (a blake2b digest: computed once per request)
            salt = request.block_hash_salt = _request_salt(request.request_id)
        hashes.extend([_unique_hash(salt, idx) for idx in range(start, limit)])
    return hashes


def _unique_hash(salt: int, idx: int) -> int:
    """Block idx of a request whose content nobody else can be known to share: (request, index)
    identifies it, so no parent is needed."""
    return salt + idx
