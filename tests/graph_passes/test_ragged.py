"""Ragged arrays (graph_passes/graph/ragged.py): the array forms agree with the plain Python lists they stand for."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hexfuse.graph_passes.graph import ragged

rows_of_ints = st.lists(st.lists(st.integers(-1, 10**6), max_size=5), max_size=60)


@settings(max_examples=200, deadline=None)
@given(rows_of_ints)
def test_tuples_gives_back_the_rows(rows: list[list[int]]) -> None:
    ptr, values = ragged.from_rows(rows)
    built = ragged.tuples(ptr, values)
    assert built == [tuple(row) for row in rows]
    assert all(type(value) is int for row in built for value in row)  # Python ints, not numpy scalars


def test_tuples_of_rows_all_one_length_and_all_empty() -> None:
    ptr, values = ragged.from_rows([[3], [1], [2]])
    assert ragged.tuples(ptr, values) == [(3,), (1,), (2,)]
    assert ragged.tuples(ragged.offsets(np.zeros(4, dtype=np.int64)), np.zeros(0, dtype=np.int64)) == [()] * 4
    assert ragged.tuples(ragged.offsets(np.zeros(0, dtype=np.int64)), np.zeros(0, dtype=np.int64)) == []
