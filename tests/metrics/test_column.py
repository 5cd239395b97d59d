"""buffers.Column against a plain list: appends, extends and random access across its flushes.

Every recorder table is a Column, and the fast-forward and compiled-vs-pure comparisons run
Columns on both sides: this is the test that compares one with the semantics it stands for.
"""

from __future__ import annotations

from array import array

from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.metrics.column import FLUSH, Column

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(-1000, 1000)),
        st.tuples(st.just("extend"), st.integers(0, FLUSH + 5)),  # may cross a flush
        st.tuples(st.just("set"), st.integers(-(1 << 30), 1 << 30)),
        st.tuples(st.just("get"), st.integers(-(1 << 30), 1 << 30)),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(_OPS)
def test_column_behaves_as_a_list(ops: list[tuple[str, int]]) -> None:
    col, ref = Column("q"), []
    for op, x in ops:
        if op == "append":
            col.append(x)
            ref.append(x)
        elif op == "extend":
            values = [len(ref) + j for j in range(x)]
            col.extend(values)
            ref.extend(values)
        elif ref:  # an index into what is there, negative ones included
            i = x % (2 * len(ref)) - len(ref)
            if op == "set":
                col[i] = x
                ref[i] = x
            else:
                assert col[i] == ref[i]
        assert len(col) == len(ref)
    assert col.array() == array("q", ref)
    assert len(col.pending) == 0  # read: every value packed
