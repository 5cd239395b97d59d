"""The workload oracle: plays the model's outputs, deterministically from (seed, request, position).

Rules (the same as the conformance fake model, `schedsim.conformance.vllm_fake_model`):
- a step samples a token for a request unless it leaves part of the request's known tokens
  (prompt + delivered outputs) uncomputed: a prefill chunk samples nothing;
- the token sampled by a step after which the request has n computed tokens is its output number
  n - prompt_len + 1 (so sync and async engines emit the same tokens at the same positions);
- the output number `target_output_tokens` is the request's EOS token; every other position gets a
  synthetic id in [3, vocab) that is never the EOS id;
- drafts are accepted one by one with probability `acceptance_rate`, by seeded draws, stopping at
  the first rejection; accepted drafts carry the tokens of their positions, then the bonus token;
  only drafts the worker holds can be accepted (`verifiable_drafts`): never a -1 placeholder of a
  padded admission, and with async scheduling none unless the request sampled in the batch right
  before (the worker proposed them then);
- the fault plan names requests whose first scheduled step fails to load their KV.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any, Final

import numpy as np
from mypy_extensions import i64
from schedsim.policies import Request

MASK64: Final = (1 << 64) - 1
_INV_2_53: Final = 1.0 / (1 << 53)
_PHI: Final = 0x9E3779B97F4A7C15  # 2^64 / golden ratio: spreads consecutive positions


def _phi_i64() -> i64:
    """_PHI - 2^64, the same multiplier as a signed 64-bit value, built from two halves: compiled,
    a literal below -2^62 would be a boxed int converted on every use, this is a native static."""
    high: i64 = -1640531527  # 0x9E3779B9 - 2^32
    return high * 0x100000000 + 0x7F4A7C15  # (a shift by 32 would be emitted as a C int shift)


PHI_I64: Final[i64] = _phi_i64()


def to_i64(x: int) -> int:
    """A 64-bit unsigned value as the signed integer with the same low 64 bits."""
    return x - (1 << 64) if x >= 1 << 63 else x


def synthetic_token(key: i64, index: i64, span: i64) -> i64:
    """3 + bits 32..63 of (key + index) * PHI (mod 2^64), mod span: the token at a position.

    `key` is the request key as a signed 64-bit integer (`to_i64`). Compiled, the product wraps
    in 64 bits; interpreted it is exact; bits 32..63 of both are the same.
    """
    x: i64 = (key + index) * PHI_I64
    return 3 + ((x >> 32) & 0xFFFFFFFF) % span


def mix64(x: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread hash of a 64-bit integer."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & MASK64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & MASK64
    return x ^ (x >> 31)


def request_key(seed: int, request_id: str) -> int:
    """A per-request 64-bit key independent of Python's randomised str hash."""
    return mix64((seed * 0x9E3779B97F4A7C15 + zlib.crc32(request_id.encode())) & MASK64)


def request_keys(seed: int, request_ids: Sequence[str]) -> np.ndarray:
    """`to_i64(request_key(seed, rid))` of many requests in one pass (int64): numpy's uint64
    arithmetic wraps modulo 2^64, as request_key's masks do, with no big-integer arithmetic per
    request."""
    crc = np.fromiter((zlib.crc32(rid.encode()) for rid in request_ids), np.uint64, len(request_ids))
    x = crc + np.uint64((seed * _PHI) & MASK64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (x ^ (x >> np.uint64(31))).view(np.int64)


@lru_cache(maxsize=4)
def token_objects(vocab_size: int) -> tuple[Any, ...]:
    """Every id of a vocabulary as one int object, made once and shared: the sampled tokens are
    these, so a step allocates no int per request and a finished request's outputs free none."""
    return tuple(range(vocab_size))


def uniform(key: int) -> float:
    """A uniform draw in [0, 1) from a key."""
    return (mix64(key) >> 11) * _INV_2_53


class TokenDraw:
    """A request's key (signed, `to_i64`) and EOS output position, as a model runner holds them:
    what `WorkloadOracle.token_rows` reads, natively, instead of lists of boxed values."""

    def __init__(self, key: i64, last: int) -> None:
        self.key: i64 = key
        self.last = last


class WorkloadOracle:
    """Knows each request's true output length and answers what the model samples."""

    def __init__(
        self,
        seed: int = 0,
        vocab_size: int = 32000,
        acceptance_rate: float = 0.7,
        kv_load_failures: Iterable[str] = (),
    ) -> None:
        if vocab_size < 8:
            raise ValueError(f"WorkloadOracle.vocab_size must be >= 8, got {vocab_size}")
        if not 0.0 <= acceptance_rate <= 1.0:
            raise ValueError(f"WorkloadOracle.acceptance_rate must be in [0, 1], got {acceptance_rate}")
        self.seed = seed
        self.vocab_size = vocab_size
        self.acceptance_rate = acceptance_rate
        self.info: dict[str, tuple[int, int]] = {}  # request id -> (signed key, EOS position)
        self.span = vocab_size - 3
        self.vocab = token_objects(vocab_size)
        self.kv_fail: set[str] = set(kv_load_failures)

    def add(self, request_id: str, target_output_tokens: int, key: int | None = None) -> None:
        """Register a request and the number of tokens after which it emits EOS (`key`: its signed
        key, where `request_keys` computed it ahead)."""
        if target_output_tokens < 1:
            raise ValueError(f"request {request_id}: target_output_tokens must be >= 1")
        if key is None:
            key = to_i64(request_key(self.seed, request_id))
        self.info[request_id] = (key, target_output_tokens - 1)

    def forget(self, request_id: str) -> None:
        """Drop a finished request's entries (keeps memory flat over long traces)."""
        self.info.pop(request_id, None)

    def token(self, req: Request, index: int) -> int:
        """The token at 0-based output position `index` of a request."""
        key, last = self.info[req.request_id]
        eos = req.eos_token_id
        if index == last and eos is not None and not req.ignore_eos:
            return eos
        tok: int = synthetic_token(key, index, self.span)
        if tok == eos or (req.stop_token_ids and tok in req.stop_token_ids):
            while tok == eos or tok in req.stop_token_ids:
                tok = 3 + (tok - 2) % self.span
        return tok

    def tokens(self, req: Request, first: int, count: int) -> list[int]:
        """`token` at positions first .. first + count - 1, the same formula as one list (jumps)."""
        key, last = self.info[req.request_id]
        return self.token_rows([req], [TokenDraw(key, last)], first - len(req.output_token_ids), count)[0]

    def token_rows(
        self, reqs: list[Request], draws: list[TokenDraw], shift: int, count: int
    ) -> list[list[int]]:
        """`tokens` of many requests at once (jumps: one row of `count` tokens per request, from
        output position len(outputs) + shift), given each one's draw as the runner holds it: no
        lookup by id."""
        span, vocab = self.span, self.vocab
        rows: list[list[int]] = []
        span64: i64 = span
        n: i64 = count
        for j in range(len(reqs)):  # (compiled, an indexed loop beats zip)
            key: i64 = draws[j].key
            pos: i64 = len(reqs[j].output_token_ids) + shift
            row: list[Any] = [None] * count
            # synthetic_token inlined, every operand native (compiled: no call, no box)
            for i in range(n):
                x: i64 = (key + pos + i) * PHI_I64
                row[i] = vocab[3 + ((x >> 32) & 0xFFFFFFFF) % span64]
            rows.append(row)
        for j in range(len(reqs)):
            req, row = reqs[j], rows[j]
            first = len(req.output_token_ids) + shift
            eos, stops = req.eos_token_id, req.stop_token_ids
            # synthetic ids are >= 3: an EOS id below cannot be among them (no scan)
            if (eos is not None and eos >= 3 and eos in row) or (stops and not set(stops).isdisjoint(row)):
                row[:] = [self.token(req, first + p) for p in range(count)]  # ids token() remaps
            elif eos is not None and not req.ignore_eos:
                last = draws[j].last
                if first <= last < first + count:
                    row[last - first] = eos
        return rows

    def num_accepted(self, request_id: str, index: int, num_drafts: int) -> int:
        """Drafts accepted when verifying `num_drafts` drafts after output position `index`."""
        p = self.acceptance_rate
        if num_drafts == 0 or p <= 0.0:
            return 0
        base = ((self.info[request_id][0] & MASK64) ^ 0x5BD1E995) + index * 0x2545F4914F6CDD1D
        for i in range(num_drafts):
            if uniform((base + i) & MASK64) >= p:
                return i
        return num_drafts

    def sample(self, req: Request, index: int, num_drafts: int) -> list[int]:
        """Accepted drafts then the bonus token, starting at output position `index`."""
        a = self.num_accepted(req.request_id, index, num_drafts) if num_drafts else 0
        if a == 0:
            return [self.token(req, index)]
        return [self.token(req, index + i) for i in range(a + 1)]

    def propose(self, req: Request, index: int) -> list[int]:
        """Drafts a proposer offers after output position `index` (their values are never checked)."""
        return [self.token(req, index + 1 + i) for i in range(req.num_spec_tokens)]

    def kv_load_fails(self, request_id: str) -> bool:
        """True once for a request the fault plan says fails its KV load."""
        if request_id in self.kv_fail:
            self.kv_fail.discard(request_id)
            return True
        return False


def verifiable_drafts(drafts: list[int], sampled_before: bool) -> int:
    """Drafts the worker can verify: the leading real ones; placeholders (-1) only stand for real
    drafts if the request sampled in the batch right before (async: the worker kept them)."""
    n = 0
    for t in drafts:
        if t < 0:
            break
        n += 1
    if n == 0 and sampled_before:
        return len(drafts)
    return n
