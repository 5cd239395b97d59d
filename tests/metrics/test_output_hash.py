"""output_hash: the documented formula, exact in Python ints, and what it tells apart."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.metrics.recorder import HASH_M1, HASH_M2, HASH_P1, HASH_P2, output_hash

_TOKENS = st.lists(st.integers(0, (1 << 31) - 1), max_size=300)


def _reference(tokens: list[int]) -> int:
    """Horner's rule in unbounded Python ints, reduced once at the end of each lane."""
    a = b = 0
    for t in tokens:
        a, b = a * HASH_M1 + t, b * HASH_M2 + t
    n = len(tokens)
    a = (a + pow(HASH_M1, n)) % HASH_P1  # the lanes start at 1 and 7
    b = (b + 7 * pow(HASH_M2, n)) % HASH_P2
    return a * (1 << 31) + b


@settings(max_examples=80, deadline=None)
@given(_TOKENS)
def test_hash_is_the_two_lane_polynomial(tokens: list[int]) -> None:
    h = output_hash(tokens)  # compiled under make test: native i64 arithmetic must not overflow
    assert h == _reference(tokens)
    assert 0 <= h < 1 << 62


@settings(max_examples=60, deadline=None)
@given(_TOKENS, st.data())
def test_hash_tells_apart_changed_reordered_and_extended_outputs(
    tokens: list[int], data: st.DataObject
) -> None:
    if tokens:
        i = data.draw(st.integers(0, len(tokens) - 1))
        changed = tokens.copy()
        changed[i] = (changed[i] + 1) % (1 << 31)
        assert output_hash(changed) != output_hash(tokens)
    assert output_hash([*tokens, 0]) != output_hash(tokens)  # length counts, even for id 0
    if len(set(tokens)) > 1:
        assert output_hash(tokens[::-1]) != output_hash(tokens) or tokens == tokens[::-1]
