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


def make_conv_bn_ir3() -> onnx.ModelProto:
    """Two conv branches (one with BatchNormalization) in the IR 3 style of the Model Zoo light models:
    opset 9, every initializer also listed as a graph input (under IR 3 that still means 'constant')."""
    rng = np.random.default_rng(0)

    def w(name: str, shape: tuple[int, ...], offset: float = 0.0) -> onnx.TensorProto:
        return nh.from_array((rng.standard_normal(shape) * 0.1 + offset).astype(np.float32), name)

    inits = [w("w1", (8, 3, 3, 3)), w("b1", (8,)), w("s1", (8,), 1.0), w("o1", (8,)), w("m1", (8,)),
             w("v1", (8,), 1.0), w("w2", (8, 3, 1, 1)), w("b2", (8,))]
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["c1", "s1", "o1", "m1", "v1"], ["n1"], name="bn1"),
             h.make_node("Relu", ["n1"], ["r1"], name="relu1"),
             h.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             h.make_node("Conv", ["p", "w2", "b2"], ["c2"], name="conv2"),
             h.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             h.make_node("Concat", ["r1", "r2"], ["y"], name="cat", axis=1)]
    ins = [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 16, 16])]
    ins += [h.make_tensor_value_info(i.name, T.FLOAT, list(i.dims)) for i in inits]
    g = h.make_graph(nodes, "conv_bn", ins, [h.make_tensor_value_info("y", T.FLOAT, [1, 16, 16, 16])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 9)])
    m.ir_version = 3
    return m


def list_initializers_as_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """What the rewrite wrote before it kept constants constant: IR 8 and every initializer an input
    (overridable from IR 4 on, so no constant folding and, on the QNN EP, CPU fallback)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    known = {i.name for i in out.graph.input}
    out.graph.input.extend(h.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                           for t in out.graph.initializer if t.name not in known)
    return out


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


