"""Engine maps: the format, where they are found, and what the committed maps of the bundled models say
(models/engines/, made with `hexfuse engines --beside` on the QNN EP's HTP simulator; CI reads them
without running QNN)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hexfuse.graph_passes.engines.engine_map import (
    EngineMap,
    Kernel,
    NodeEngines,
    beside_path,
    cache_path,
    engine_map_from_json,
    find_engine_map,
    load_engine_map,
)
from hexfuse.graph_passes.engines.classify import OPTRACE, RULES, Engine, decide
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import file_sha256

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
MAPPED = ["googlenet", "googlenet_qdq", "gptj_block", "gptj_block_qdq", "llama_prefill_decode_qdq"]


def _map(**nodes: NodeEngines) -> EngineMap:
    return EngineMap("m.onnx", "ab" * 32, "sm8650", dict(nodes), ("dq0",),
                     {"<graph input>": (Kernel("*InputSlice", "dma", "move"),)}, {"tool": "test"})


CONV = NodeEngines("matrix", "hmx", (Kernel("ConvLayer_s1.opt", "hmx", "matrix", 4),
                                     Kernel("ConvLayer.opt.weights_to_vtcm", "dma", "move")), "conv0_token_9")


def test_json_round_trip_is_exact_and_deterministic():
    engine_map = _map(conv0=CONV, relu0=NodeEngines("none", "none", (), "", "conv0"))
    text = engine_map.to_json()
    again = engine_map_from_json(text, "memory")
    assert again == engine_map and again.to_json() == text
    assert again.node("relu0").folded_into == "conv0"
    assert again.node("dq0") == NodeEngines("none", "none")  # no op of its own in the schedule
    assert again.node("other") is None and again.node("") is None  # not in the model QNN saw: unknown


@pytest.mark.parametrize("edit, message", [
    (lambda raw: raw.update(schema="other/1"), "not a hexfuse.engine_map/1 file"),
    (lambda raw: raw.update(model_sha256=""), "field 'model_sha256' must be a non-empty string"),
    (lambda raw: raw["nodes"]["conv0"].update(engine="gpu"), "node 'conv0': needs engine in"),
    (lambda raw: raw["nodes"]["conv0"]["kernels"].append(["X", "hmx", "matrix", 0]), "bad kernel entry"),
    (lambda raw: raw["nodes"]["conv0"]["kernels"].append(["X", "npu", "matrix", 1]), "bad kernel entry"),
    (lambda raw: raw.update(absent="dq0"), "'absent' must be a list"),
])
def test_bad_maps_fail_in_one_line_naming_the_file(edit, message):
    raw = json.loads(_map(conv0=CONV).to_json())
    edit(raw)
    with pytest.raises(HexfuseError) as error:
        engine_map_from_json(json.dumps(raw), "bad.json")
    assert str(error.value).startswith("engine map bad.json") and message in str(error.value)
    assert "\n" not in str(error.value)


def test_lookup_order_explicit_beside_cache(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not really a model, but bytes to hash")
    sha = file_sha256(model)
    env = {"HEXFUSE_ENGINES_CACHE": str(tmp_path / "cache")}
    assert find_engine_map(model, sha, "sm8650", environ=env).engine_map is None
    cached = EngineMap("m.onnx", sha, "sm8650", {"conv0": CONV})
    cached.write(cache_path(sha, "sm8650", env))
    found = find_engine_map(model, sha, "sm8650", environ=env)
    assert found.engine_map == cached and "cache" in found.note
    assert find_engine_map(model, sha, "sm8550", environ=env).engine_map is None  # maps are per target
    beside = EngineMap("m.onnx", sha, "sm8650", {"conv0": CONV, "x": NodeEngines("vector", "hvx")})
    beside.write(beside_path(model, "sm8650"))
    assert find_engine_map(model, sha, "sm8650", environ=env).engine_map == beside  # beside the model first
    explicit = tmp_path / "given.json"
    EngineMap("m.onnx", sha, "sm8550", {}).write(explicit)
    found = find_engine_map(model, sha, "sm8650", explicit, environ=env)
    assert found.engine_map.nodes == {} and "made for target sm8550, used for sm8650" in found.note


def test_a_map_of_another_model_is_refused_or_ignored(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"version 2")
    stale = EngineMap("m.onnx", file_sha256(MODELS / "googlenet.onnx"), "sm8650", {"conv0": CONV})
    stale.write(beside_path(model, "sm8650"))
    found = find_engine_map(model, file_sha256(model), "sm8650", environ={"HEXFUSE_ENGINES_CACHE": str(tmp_path)})
    assert found.engine_map is None and "made from another version of the model" in found.note
    with pytest.raises(HexfuseError, match=r"made from m.onnx \(sha256 .*\), not from m.onnx"):
        find_engine_map(model, file_sha256(model), "sm8650", beside_path(model, "sm8650"))


@pytest.mark.parametrize("name", MAPPED)
def test_committed_maps_belong_to_the_bundled_models(name):
    engine_map = load_engine_map(beside_path(MODELS / f"{name}.onnx", "sm8650"))
    assert engine_map.model == f"{name}.onnx" and engine_map.target == "sm8650"
    assert engine_map.model_sha256 == file_sha256(MODELS / f"{name}.onnx")  # rebuild the map with the model
    assert engine_map.made_with["preset"] == "htp_v75_burst"
    assert engine_map.nodes and all(n.kernels or n.folded_into for n in engine_map.nodes.values())
    assert beside_path(MODELS / f"{name}.onnx", "sm8650").read_text() == engine_map.to_json()  # as written


def _ops(name: str) -> dict[str, str]:
    import onnx

    return {node.name: node.op_type for node in onnx.load(str(MODELS / f"{name}.onnx")).graph.node}


def test_qdq_convolutions_run_on_hmx_with_dma_moves_and_concat_is_hvx_work():
    engine_map = load_engine_map(beside_path(MODELS / "googlenet_qdq.onnx", "sm8650"))
    ops = _ops("googlenet_qdq")
    convs = [n for n, op in ops.items() if op in ("Conv", "Gemm")]
    assert convs and all(engine_map.node(n).resource == "hmx" for n in convs)
    assert all(any(k.resource == "dma" and k.role == "move" for k in engine_map.node(n).kernels) for n in convs)
    concat = engine_map.node("node_cat")
    assert concat.resource == "hvx" and concat.moves_only  # not a DMA transfer, whatever its name says
    assert all(engine_map.node(n).engine == "none" for n, op in ops.items() if op == "DequantizeLinear")


def test_float_relus_fold_into_their_fp16_convolutions():
    engine_map = load_engine_map(beside_path(MODELS / "googlenet.onnx", "sm8650"))
    relu = engine_map.node("node_relu")
    assert relu.folded_into == "node_conv2d" and not relu.kernels
    conv = engine_map.node("node_conv2d")
    assert conv.resource == "hmx" and conv.qnn_node == "node_relu"  # QNN named the fused ops after the Relu
    assert any("fp16" in k.name for k in conv.kernels)


def test_decide_keeps_matrix_work_matrix_and_moves_on_hvx_on_htp():
    gptj = load_engine_map(beside_path(MODELS / "gptj_block.onnx", "sm8650"))
    add_on_hmx = gptj.node("node_add_5")  # QNN runs this Add as an HMX convolution
    assert add_on_hmx.engine == "matrix" and add_on_hmx.resource == "hmx"
    decision = decide("Add", "", add_on_hmx, htp=True)
    assert decision.engine is Engine.VECTOR and decision.resource == "hmx" and decision.source == OPTRACE
    llama = load_engine_map(beside_path(MODELS / "llama_prefill_decode_qdq.onnx", "sm8650"))
    transpose = decide("Transpose", "", llama.node("node_transpose"), htp=True)
    assert transpose.engine is Engine.VECTOR and transpose.moves and transpose.note.startswith("move on HVX")
    folded = decide("Transpose", "", llama.node("node_transpose_12"), htp=True)
    assert folded.resource == "none" and "folded into node_linear_17" in folded.note
    matmul = decide("MatMul", "", NodeEngines("vector", "hvx", (Kernel("mul_op", "hvx", "compute"),)), htp=True)
    assert matmul.engine is Engine.MATRIX and matmul.resource == "hvx"  # QNN's ops either way, never ours
    # without a map, the rules: a Transpose is HVX work on HTP and a DMA lane's on the host
    assert decide("Transpose", "", None, htp=True).engine is Engine.VECTOR
    host = decide("Transpose", "", llama.node("node_transpose"), htp=False)
    assert host.engine is Engine.DMA and host.source == RULES  # the map describes HTP only
    assert decide("Reshape", "", llama.node("node_view"), htp=True).engine is Engine.FREE  # views stay views


def test_moving_the_model_keeps_its_map(tmp_path):
    for name in ("googlenet_qdq.onnx",):
        shutil.copy(MODELS / name, tmp_path / name)
    (tmp_path / "engines").mkdir()
    shutil.copy(beside_path(MODELS / "googlenet_qdq.onnx", "sm8650"), tmp_path / "engines")
    model = tmp_path / "googlenet_qdq.onnx"
    found = find_engine_map(model, file_sha256(model), "sm8650", environ={"HEXFUSE_ENGINES_CACHE": str(tmp_path / "c")})
    assert found.engine_map is not None and found.engine_map.path.startswith(str(tmp_path))
