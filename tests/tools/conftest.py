"""Fixtures for the A/B harness tests."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from ab_testmodels import fuse_nodes, make_fused, make_original


@pytest.fixture()
def tiny_pair(tmp_path: Path) -> tuple[str, str]:
    o, f = tmp_path / "orig.onnx", tmp_path / "fused.onnx"
    onnx.save(make_original(), str(o))
    onnx.save(make_fused(), str(f))
    return str(o), str(f)


@pytest.fixture(scope="session")
def inception_pair(tmp_path_factory) -> tuple[str, str]:
    """light_inception_v1 from the onnx wheel (opset 9 -> 13) and a fused copy of two branch convs."""
    from onnx import version_converter
    src = Path(onnx.__file__).parent / "backend/test/data/light/light_inception_v1.onnx"
    m = version_converter.convert_version(onnx.load(str(src)), 13)
    for i, n in enumerate(m.graph.node):
        n.name = n.name or f"{n.op_type.lower()}_{i}"
    # the 1x1 conv and the 3x3-reduce conv of inception_3a read the same input and nothing of each other
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    src_in = convs[3].input[0]
    pair = [n.name for n in convs if n.input[0] == src_in][:2]
    assert len(pair) == 2
    d = tmp_path_factory.mktemp("inception")
    o, f = d / "inception13.onnx", d / "inception13_fused.onnx"
    onnx.save(m, str(o))
    onnx.save(fuse_nodes(m, pair), str(f))
    return str(o), str(f)
