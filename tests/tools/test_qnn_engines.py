"""tools/qnn_engines.py: from an optrace schematic of the ORIGINAL model to the engine map.

A hand-written schematic in the dump's format covers the naming cases measured on the QNN EP
(docstring of tools/qnn_engines.py): a QDQ unit renamed ``<node>_token_<n>``, a Conv -> Relu pair whose
HMX ops carry the Relu's id, a layout Transpose QNN inserted, an ORT fusion ``<node>/<Fusion>_<n>``,
graph input/output ops, and nodes with no op at all. One test prepares a bundled model for real.
"""

from __future__ import annotations

import json
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from hexfuse.cli import main
from hexfuse.graph_passes.engines.engine_map import beside_path, load_engine_map
from hexfuse.graph_passes.spec.model import FUSED_DOMAIN
from hexfuse.tools.optrace import read_schematic
from hexfuse.tools.qnn_engines import engine_map_from_schedule

ROOT = Path(__file__).resolve().parents[2]

SCHEMATIC = """\
graph_before_optimization = {
\t0x0000000000000002: {'operation':'q::Input', 'inputs' : [], 'outputs' : []},
\t0x0000000000000003: {'operation':'q::Output', 'inputs' : [(0x40,0),], 'outputs' : []},
\t0x0000000000000010: {'operation':'q::QNN_Transpose', 'inputs' : [(0x2,0),], 'outputs' : []},
\t0x0000000000000018: {'operation':'q::QNN_Conv2d', 'inputs' : [(0x10,0),], 'outputs' : []},
\t0x0000000000000020: {'operation':'q::QNN_Conv2d', 'inputs' : [(0x18,0),], 'outputs' : []},
\t0x0000000000000021: {'operation':'q::QNN_Relu', 'inputs' : [(0x20,0),], 'outputs' : []},
\t0x0000000000000030: {'operation':'q::QNN_FullyConnected', 'inputs' : [(0x21,0),], 'outputs' : []},
\t0x0000000000000040: {'operation':'q::QNN_Concat', 'inputs' : [(0x30,0),(0x18,0),], 'outputs' : []},
}
qnn_name_translations = {
0x0000000000000010: 'Transpose_token_4',
0x0000000000000018: 'conv0_token_9',
0x0000000000000020: 'conv1',
0x0000000000000021: 'relu1',
0x0000000000000030: 'mm0/MatMulAddFusion_2',
0x0000000000000040: 'cat0',
}
qnn_graph_name = "original"
opdesc_map ={
  '#1': opdesc( 0x400100000002, "q::*InputSlice", runlist_pos = 0, op_flags=('FOR_DMA','MOVE_EARLY',)),
  '#2': opdesc( 0x400200000002, "q::*InputSlice", runlist_pos = 1, op_flags=('FOR_DMA','MOVE_LATE',), csts_in=('#1',)),
  '#3': opdesc( 0x400300000010, "q::Transpose_impl", runlist_pos = 2, op_flags=('FOR_HVX','MOVE_EARLY',)),
  '#4': opdesc( 0x400400000018, "q::ConvLayer.opt.weights_to_vtcm", runlist_pos = 3,
      op_flags=('INHIBIT_CONST_PROP','FOR_DMA','MOVE_EARLY','IS_COPY',)),
  '#5': opdesc( 0x400500000018, "q::ConvLayer_s1.opt", runlist_pos = 4, op_flags=('RESOURCE_HMX',)),
  '#6': opdesc( 0x400600000018, "q::ConvLayer_s1.opt", runlist_pos = 5, op_flags=('RESOURCE_HMX',)),
  '#7': opdesc( 0x400700000021, "q::ConvLayer.fp16.s1.tcm", runlist_pos = 6, op_flags=('RESOURCE_HMX',)),
  '#8': opdesc( 0x400800000021, "q::zero_to_vtcm.fp16", runlist_pos = 7, op_flags=('FOR_DMA','MOVE_EARLY',)),
  '#9': opdesc( 0x400900000030, "q::MatMul_bias", runlist_pos = 8, op_flags=('FOR_HVX','MOVE_EARLY',)),
  '#10': opdesc( 0x400a00000030, "q::ConvLayer.opt.convert_weights_to_signed.packed.tcm", runlist_pos = 9,
      op_flags=('FOR_HVX','MOVE_EARLY',)),
  '#11': opdesc( 0x400b00000040, "q::Concat", runlist_pos = 10, op_flags=('FOR_HVX','MOVE_EARLY',)),
  '#12': opdesc( 0x400c00000000, "@Sync", runlist_pos = 11, op_flags=()),
  '#13': opdesc( 0x400d00000003, "q::Dequantize", runlist_pos = 12, op_flags=('FOR_HVX','MOVE_EARLY',)),
}
"""


def _model(path: Path) -> Path:
    """Only the node names and op types matter to the map."""
    nodes = [helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["x"], name="x_DequantizeLinear"),
             helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0"),
             helper.make_node("Conv", ["c0", "w1"], ["c1"], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "w2"], ["m0"], name="mm0"),
             helper.make_node("Add", ["m0", "b"], ["a0"], name="add0"),
             helper.make_node("Concat", ["a0", "c0"], ["y"], name="cat0", axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("xq", TensorProto.UINT8, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(graph), path)
    return path


@pytest.fixture()
def schematic(tmp_path: Path) -> Path:
    path = tmp_path / "original_schematic.bin"
    path.write_text(SCHEMATIC)
    return path


def test_every_final_op_is_attributed_to_its_onnx_node(tmp_path, schematic):
    model = onnx.load(str(_model(tmp_path / "m.onnx")))
    engine_map = engine_map_from_schedule(read_schematic(schematic), model, "m.onnx", "0" * 64, "sm8650")
    conv0 = engine_map.node("conv0")  # 'conv0_token_9': a QDQ unit QNN renamed
    assert (conv0.engine, conv0.resource, conv0.qnn_node) == ("matrix", "hmx", "conv0_token_9")
    assert [(k.name, k.resource, k.role, k.count) for k in conv0.kernels] == [
        ("ConvLayer_s1.opt", "hmx", "matrix", 2), ("ConvLayer.opt.weights_to_vtcm", "dma", "move", 1)]
    conv1 = engine_map.node("conv1")  # the HMX ops carried the Relu's id: moved back to the Conv
    assert conv1.resource == "hmx" and conv1.qnn_node == "relu1" and {k.name for k in conv1.kernels} == {
        "ConvLayer.fp16.s1.tcm", "zero_to_vtcm.fp16"}
    assert engine_map.node("relu1").folded_into == "conv1" and not engine_map.node("relu1").kernels
    mm0 = engine_map.node("mm0")  # ORT's MatMulAddFusion reached QNN as 'mm0/MatMulAddFusion_2'
    assert (mm0.engine, mm0.resource) == ("matrix", "hvx")  # a matrix kernel on HVX, with an HVX helper
    assert [k.role for k in mm0.side_kernels("hvx")] == ["compute"]
    cat0 = engine_map.node("cat0")
    assert (cat0.engine, cat0.resource) == ("vector", "hvx") and cat0.moves_only
    assert set(engine_map.absent) == {"x_DequantizeLinear", "add0"}
    assert set(engine_map.unattributed) == {"<graph input>", "<graph output>", "Transpose_token_4"}
    assert engine_map.unattributed["<graph input>"][0].count == 1  # a launch/wait pair is one op


def test_engines_command_from_a_schematic_is_deterministic(tmp_path, schematic, capsys):
    model = _model(tmp_path / "m.onnx")
    outputs = []
    for name in ("a.json", "b.json"):
        assert main(["engines", str(model), "--target", "v75", "--schematic", str(schematic),
                     "-o", str(tmp_path / name)]) == 0
        outputs.append((tmp_path / name).read_bytes())
    assert outputs[0] == outputs[1]
    out = capsys.readouterr().out
    assert "engine map of m.onnx for sm8650: 4 nodes with ops" in out
    assert "Concat: rules dma, QNN hvx" in out and "Relu: rules hvx, QNN folded into a matrix node" in out
    assert main(["engines", str(model), "--target", "v75", "--schematic", str(schematic), "--json",
                 "-o", str(tmp_path / "c.json")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["folded"] == ["relu1"] and data["by_engine"] == {"matrix on hmx": 2, "matrix on hvx": 1, "vector on hvx": 1}


def test_engines_command_errors_are_one_line(tmp_path, capsys):
    assert main(["engines", str(tmp_path / "missing.onnx"), "--schematic", "x"]) == 1
    assert capsys.readouterr().err.strip().startswith("hexfuse: error: model")
    model = _model(tmp_path / "m.onnx")
    assert main(["engines", str(model), "--target", "x-elite"]) == 1  # no preset known for it
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no QNN EP preset is known for target 'x-elite'" in err[0] and "--preset" in err[0]


def test_engines_command_never_writes_over_what_it_reads(tmp_path, schematic, capsys):
    model = _model(tmp_path / "m.onnx")
    before = {path: path.read_bytes() for path in (model, schematic)}
    for out in (model, schematic):
        assert main(["engines", str(model), "--target", "v75", "--schematic", str(schematic), "-o", str(out)]) == 1
        assert "refusing to overwrite" in capsys.readouterr().err
    assert {path: path.read_bytes() for path in before} == before


def test_engines_command_refuses_the_schematic_of_another_model(tmp_path, schematic, capsys):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="conv0")] + [  # one name in common, three others
        helper.make_node("Relu", ["y" if i == 0 else f"r{i - 1}"], [f"r{i}"], name=f"other{i}") for i in range(3)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("r2", TensorProto.FLOAT, [1])])
    other = tmp_path / "other.onnx"
    onnx.save(helper.make_model(graph), other)
    assert main(["engines", str(other), "--target", "v75", "--schematic", str(schematic),
                 "-o", str(tmp_path / "map.json")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a schematic of other.onnx" in err[0]
    assert not (tmp_path / "map.json").exists()


def test_engines_command_refuses_a_fused_model(tmp_path, schematic, capsys):
    node = helper.make_node("HexFuse_0", ["x"], ["y"], name="hexfuse/HexFuse_0", domain=FUSED_DOMAIN)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    fused = tmp_path / "fused.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(FUSED_DOMAIN, 1)]),
              fused)
    assert main(["engines", str(fused), "--target", "v75", "--schematic", str(schematic),
                 "-o", str(tmp_path / "map.json")]) == 1
    assert "is fused by hexfuse; map the original model" in capsys.readouterr().err
    assert not (tmp_path / "map.json").exists()


def _same_runtime() -> str | None:
    if find_spec("onnxruntime_qnn") is None:
        return "onnxruntime-qnn not installed (pip install onnxruntime-qnn)"
    made = load_engine_map(beside_path(ROOT / "models" / "googlenet_qdq.onnx", "sm8650")).made_with["runtime"]
    installed = f"onnxruntime-qnn {metadata.version('onnxruntime-qnn')}"
    return None if made == installed else f"the committed maps were made with {made}, {installed} is installed"


@pytest.mark.skipif(_same_runtime() is not None, reason=str(_same_runtime()))
def test_preparing_a_bundled_model_reproduces_its_committed_map(tmp_path, capsys):
    """Runs the QNN EP's HTP backend (the x86 simulator in the onnxruntime-qnn wheel; no SDK needed)."""
    model = ROOT / "models" / "googlenet_qdq.onnx"
    out = tmp_path / "map.json"
    assert main(["engines", str(model), "--target", "sm8650", "-o", str(out)]) == 0
    assert out.read_text() == beside_path(model, "sm8650").read_text()
