"""Sparse initializers (``graph.sparse_initializer``) as the dense initializers they stand for.

Shape inference and the checker see a sparse initializer only as a name, so a MatMul reading one
fails inference ("wrong rank") and the definition walk calls it undefined. The pass reads them
dense; the report's "Written model" section says so, since a fused model keeps them dense. A
nothing-to-fuse copy is the file's own bytes and keeps them sparse.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from hexfuse.graph_passes.errors import HexfuseError

MAX_DENSE_BYTES = 2**31 - 1  # protobuf cannot hold more in one model


def _dense(sparse: onnx.SparseTensorProto) -> np.ndarray:
    values = numpy_helper.to_array(sparse.values).reshape(-1)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64) if sparse.HasField("indices") else None
    shape = tuple(int(d) for d in sparse.dims)
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in {list(shape)}")
    size = int(np.prod(shape, dtype=object)) if shape else 1
    if size * values.dtype.itemsize > MAX_DENSE_BYTES:
        raise ValueError(f"{size} elements dense are over protobuf's 2 GiB limit")
    dense = np.zeros(size, dtype=values.dtype)
    if indices is None or indices.size == 0:
        if values.size not in (0, size):
            raise ValueError(f"{values.size} values without indices for {size} elements")
        dense[: values.size] = values
        return dense.reshape(shape)
    if indices.ndim == 2:  # [NNZ, rank] coordinates
        if indices.shape[1] != len(shape) or np.any(indices < 0) or np.any(indices >= np.asarray(shape)):
            raise ValueError("coordinate indices out of range")
        indices = np.ravel_multi_index(indices.T, shape)
    elif indices.ndim != 1 or np.any(indices < 0) or np.any(indices >= size):
        raise ValueError("linear indices out of range")
    if indices.size != values.size:
        raise ValueError(f"{indices.size} indices for {values.size} values")
    dense[indices] = values
    return dense.reshape(shape)


def densify_sparse_initializers(path: Path, model: onnx.ModelProto) -> tuple[str, ...]:
    """Move the main graph's sparse initializers into ``graph.initializer`` (in place); their names."""
    graph = model.graph
    if not graph.sparse_initializer:
        return ()
    names = []
    for sparse in graph.sparse_initializer:
        name = sparse.values.name
        try:
            dense = _dense(sparse)
        except (ValueError, TypeError, KeyError) as exc:  # numpy_helper raises these on odd data
            raise HexfuseError(f"{path}: sparse initializer {name!r} is malformed: {exc}") from None
        graph.initializer.append(numpy_helper.from_array(dense, name))
        names.append(name)
    del graph.sparse_initializer[:]
    return tuple(names)
