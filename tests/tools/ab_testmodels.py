"""Small models and helpers for the A/B harness tests, built with onnx.helper.

A plain module, not conftest.py: `from conftest import` is ambiguous when other test folders have one.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # plain `pytest` from the repo without an editable install
    sys.path.insert(0, str(ROOT))


def _io(a_name: str = "a") -> tuple[list, list]:
    ins = [h.make_tensor_value_info(a_name, T.FLOAT, [4, 16]), h.make_tensor_value_info("b", T.FLOAT, [4, 32])]
    outs = [h.make_tensor_value_info("y1", T.FLOAT, [4, 16]), h.make_tensor_value_info("y2", T.FLOAT, [4, 32])]
    return ins, outs


def _w() -> onnx.TensorProto:
    return nh.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "W")


def make_original(a_name: str = "a") -> onnx.ModelProto:
    """Two independent branches: MatMul -> Relu, and Softmax -> Add."""
    nodes = [h.make_node("MatMul", [a_name, "W"], ["mm"], name="mm0"),
             h.make_node("Relu", ["mm"], ["y1"], name="relu1"),
             h.make_node("Softmax", ["b"], ["sm"], name="softmax2", axis=-1),
             h.make_node("Add", ["sm", "b"], ["y2"], name="add3")]
    ins, outs = _io(a_name)
    m = h.make_model(h.make_graph(nodes, "orig", ins, outs, [_w()]), opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def make_fused(serial: int = 0) -> onnx.ModelProto:
    """MatMul and Softmax wrapped in one model-local function, as the pass would write it."""
    body = [h.make_node("MatMul", ["a", "W"], ["mm"]), h.make_node("Softmax", ["b"], ["sm"], axis=-1)]
    fn = h.make_function("hexfuse", "HexFuse_g0", ["a", "W", "b"], ["mm", "sm"], body,
                         [h.make_opsetid("", 17)], attributes=["serial"])
    nodes = [h.make_node("HexFuse_g0", ["a", "W", "b"], ["mm", "sm"], name="hexfuse_g0", domain="hexfuse",
                         serial=serial),
             h.make_node("Relu", ["mm"], ["y1"], name="relu1"),
             h.make_node("Add", ["sm", "b"], ["y2"], name="add3")]
    ins, outs = _io()
    vi = [h.make_tensor_value_info("mm", T.FLOAT, [4, 16]), h.make_tensor_value_info("sm", T.FLOAT, [4, 32])]
    g = h.make_graph(nodes, "fused", ins, outs, [_w()], value_info=vi)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("hexfuse", 1)], functions=[fn])
    m.ir_version = 9
    return m


def fuse_nodes(model: onnx.ModelProto, names: list[str], op_type: str = "HexFuse_t0") -> onnx.ModelProto:
    """Wrap the named (mutually independent) top-level nodes in one hexfuse function node."""
    model = onnx.shape_inference.infer_shapes(model)
    g = model.graph
    picked = [n for n in g.node if n.name in names]
    assert len(picked) == len(names)
    produced = {o for n in picked for o in n.output}
    inputs: list[str] = []
    for n in picked:
        for t in n.input:
            if t and t not in produced and t not in inputs:
                inputs.append(t)
    outputs = [o for n in picked for o in n.output]
    fn = h.make_function("hexfuse", op_type, inputs, outputs, [onnx.NodeProto.FromString(n.SerializeToString())
                                                               for n in picked],
                         list(model.opset_import), attributes=["serial"])
    first = min(i for i, n in enumerate(g.node) if n.name in names)
    call = h.make_node(op_type, inputs, outputs, name=op_type.lower(), domain="hexfuse", serial=0)
    kept = [n for n in g.node if n.name not in names]
    kept.insert(first, call)
    del g.node[:]
    g.node.extend(kept)
    model.functions.append(fn)
    model.opset_import.append(h.make_opsetid("hexfuse", 1))
    return model


def fake_library(directory: Path, name: str, source: str) -> str:
    """A shared library compiled from C ``source`` (for libraries that are the wrong kind on purpose)."""
    import shutil
    import subprocess

    import pytest
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc/gcc) to build a stand-in library")
    src, lib = Path(directory) / f"{name}.c", Path(directory) / f"lib{name}.so"
    src.write_text(source)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    return str(lib)


# Exports the interface symbol the QNN EP looks up, then refuses: registration fails inside the EP.
REFUSING_QNN_PACKAGE = "int HexFuseInterfaceProvider(void* interface) { (void)interface; return 1; }\n"
HOST_BUILD = "int hexfuse_run(void) { return 0; }\nint hexfuse_num_ops(void) { return 0; }\n"


def run_cli(argv: list[str]) -> int:
    from hexfuse.cli import main
    return main(argv)


