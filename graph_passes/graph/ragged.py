"""Ragged arrays: one flat value array and row offsets (CSR), for array processing of per-node and
per-task lists (ports of a node, nodes of a task) without a Python loop per element."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np


def offsets(lengths: np.ndarray) -> np.ndarray:
    """Row offsets of rows of these lengths: offsets[i] .. offsets[i + 1] is row i."""
    ptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    return ptr


def from_rows(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of a list of integer rows."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    ptr = offsets(lengths)
    values = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(ptr[-1]))
    return ptr, values


def tuples(ptr: np.ndarray, values: np.ndarray) -> list[tuple[int, ...]]:
    """The rows as a list of tuples of Python ints. Rows of one length are built together, column by
    column (``zip``): 2-3x faster than slicing row by row, where most rows have the same few lengths."""
    lengths = np.diff(ptr)
    count = len(lengths)
    result: list[tuple[int, ...]] = [()] * count
    for length in distinct(lengths).tolist():
        if length == 0:
            continue
        rows = np.flatnonzero(lengths == length)
        block = values[ptr[rows][:, None] + np.arange(length, dtype=np.int64)]
        built = zip(*block.T.tolist())
        if len(rows) == count:
            return list(built)
        for row, value in zip(rows.tolist(), built):
            result[row] = value
    return result


def take(ptr: np.ndarray, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The given rows, concatenated: (their values, the position in ``rows`` each value came from)."""
    starts, lengths = ptr[rows], ptr[rows + 1] - ptr[rows]
    total = int(lengths.sum())
    owner = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
    # value k of the result is values[starts[owner[k]] + (k - first position of owner[k])]
    index = np.arange(total, dtype=np.int64) - np.repeat(offsets(lengths)[:-1] - starts, lengths)
    return values[index], owner


def segments(owner: np.ndarray, count: int) -> np.ndarray:
    """Offsets of the runs of a sorted owner array with owners 0 .. count - 1 (empty runs included)."""
    return offsets(np.bincount(owner, minlength=count))


def by_owner(parts: Sequence[tuple[np.ndarray, np.ndarray]], count: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of rows 0 .. count - 1 gathered from (values, owner row) parts: each row holds
    its values part after part, each part's values in their order (a stable sort by owner)."""
    values = np.concatenate([v for v, _ in parts])
    owners = np.concatenate([o for _, o in parts])
    return offsets(np.bincount(owners, minlength=count)), values[np.argsort(owners, kind="stable")]


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values. (``np.unique`` without return flags takes a hash path in numpy 2.3+
    that is 10-30x slower than a sort on these arrays.)"""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]
