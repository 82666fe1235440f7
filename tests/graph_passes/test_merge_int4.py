"""``hexfuse merge`` of w4a16 models: 4-bit initializers stay 4-bit (type, values, packed size), equal ones are
stored once, and the merged model computes what each model computes alone, bit for bit on ORT CPU.
(onnx-graphsurgeon writes a loaded int4 constant one byte per element: the merge used to fail.)

ORT CPU (1.32) rewrites DequantizeLinear(4-bit weight) + MatMul into MatMulNBits (int8-quantized activations
at its default accuracy level 4) only where the weight has one reader: a model alone gets it, a merged model
whose requests share the weight does not. Shared weights are therefore compared with that rewrite off
(``session.disable_quant_qdq``), i.e. on ONNX's own semantics; unshared ones with ORT's defaults."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from hexfuse.cli import main
from hexfuse.graph_passes.combine.run import combine_requests
from hexfuse.graph_passes.merge.requests import merge_requests

K, N, M = 8, 5, 3  # x[rows, K] @ int4 W1[K, N] (blocked scales) @ uint4 W2[N, M] (per column, uint4 zero points)
_NIBBLES = (TensorProto.INT4, TensorProto.UINT4)


def _w4a16(path: Path, rows: int, seed: int) -> Path:
    """A two-MatMul w4a16 model at opset 21: W1 stored raw, W2 and its zero points as packed int32_data
    (both encodings onnx allows); W2 and the zero points hold an odd count of nibbles (a padded last byte)."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.integers(-8, 8, (K, N)).astype(ml_dtypes.int4), "w1")
    s1 = numpy_helper.from_array((rng.random((K // 4, N)) + 0.5).astype(np.float32), "s1")
    w2 = helper.make_tensor("w2", TensorProto.UINT4, (N, M), rng.integers(0, 16, N * M).tolist())
    s2 = numpy_helper.from_array((rng.random(M) * 0.1 + 0.05).astype(np.float32), "s2")
    z2 = helper.make_tensor("z2", TensorProto.UINT4, (M,), rng.integers(0, 16, M).tolist())
    nodes = [
        helper.make_node("DequantizeLinear", ["w1", "s1"], ["w1f"], axis=0, block_size=4),
        helper.make_node("MatMul", ["x", "w1f"], ["h"]),
        helper.make_node("DequantizeLinear", ["w2", "s2", "z2"], ["w2f"], axis=1),
        helper.make_node("MatMul", ["h", "w2f"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "w4a16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (rows, K))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (rows, M))],
                              initializer=[w1, s1, w2, s2, z2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


ONNX_SEMANTICS = {"session.disable_quant_qdq": "1"}  # no lossy MatMulNBits rewrite (module docstring)


def _run(model: onnx.ModelProto | Path, feeds: dict, config: dict[str, str]) -> list[np.ndarray]:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    options = ort.SessionOptions()
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"]).run(None, feeds)


def _nibbles(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer if t.data_type in _NIBBLES}


@pytest.fixture()
def prefill_decode(tmp_path) -> list[Path]:
    return [_w4a16(tmp_path / "prefill.onnx", 4, seed=1), _w4a16(tmp_path / "decode.onnx", 1, seed=1)]


def _assert_runs_as_apart(model: onnx.ModelProto, paths: list[Path], config: dict[str, str]) -> None:
    feeds, want = {}, []
    for number, path in enumerate(paths):
        rows = onnx.load(path).graph.input[0].type.tensor_type.shape.dim[0].dim_value
        x = np.random.default_rng(number).standard_normal((rows, K)).astype(np.float32)
        feeds[f"{path.stem}/x"] = x
        want += _run(path, {"x": x}, config)
    got = _run(model, feeds, config)
    assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))


def test_equal_4bit_weights_are_stored_once_packed_and_outputs_are_bit_exact(prefill_decode):
    merged = merge_requests(prefill_decode)
    onnx.checker.check_model(merged.model, full_check=True)
    kept, original = _nibbles(merged.model), _nibbles(onnx.load(prefill_decode[0]))
    assert set(kept) == set(original) == {"w1", "w2", "z2"}  # shared under their own names
    for name, tensor in kept.items():  # the TensorProto as read: type, values, encoding, packed size
        assert tensor.SerializeToString() == original[name].SerializeToString(), name
    assert merged.shared_initializers == 5  # w1, s1, w2, s2, z2
    assert merged.shared_bytes == 20 + 40 + 8 + 12 + 2  # 4-bit ones counted packed: 40, 15 and 3 nibbles
    _assert_runs_as_apart(merged.model, prefill_decode, ONNX_SEMANTICS)


def test_different_4bit_weights_stay_per_request_and_inputs_keep_their_names(tmp_path):
    paths = [_w4a16(tmp_path / "a.onnx", 4, seed=1), _w4a16(tmp_path / "b.onnx", 2, seed=2)]
    merged = merge_requests(paths)
    onnx.checker.check_model(merged.model, full_check=True)
    kept = _nibbles(merged.model)
    assert set(kept) == {f"{r}/{n}" for r in "ab" for n in ("w1", "w2", "z2")}
    for path in paths:
        for name, tensor in _nibbles(onnx.load(path)).items():
            assert numpy_helper.to_array(kept[f"{path.stem}/{name}"]).tobytes() == numpy_helper.to_array(tensor).tobytes()
            assert kept[f"{path.stem}/{name}"].data_type == tensor.data_type
    for loaded in merged.inputs:  # gs renames what it writes: the models as read keep their own names
        assert set(_nibbles(loaded.model)) == {"w1", "w2", "z2"}
    _assert_runs_as_apart(merged.model, paths, {})  # one reader per weight: ORT's defaults


def test_cli_writes_a_valid_w4a16_merge_byte_identically(prefill_decode, tmp_path, capsys):
    written = []
    for name in ("x", "y"):
        out = tmp_path / f"{name}.onnx"
        assert main(["merge", *map(str, prefill_decode), "-o", str(out)]) == 0, capsys.readouterr().err
        written.append(out.read_bytes())
    assert written[0] == written[1]
    model = onnx.load(tmp_path / "x.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert {t.data_type for t in _nibbles(model).values()} == {TensorProto.INT4, TensorProto.UINT4}
    _assert_runs_as_apart(model, prefill_decode, ONNX_SEMANTICS)


def test_combine_of_a_merged_w4a16_model_keeps_its_4bit_weights(prefill_decode, tmp_path):
    path = tmp_path / "merged.onnx"
    onnx.save(merge_requests(prefill_decode).model, path)
    result = combine_requests(path, everything=True)
    assert result.verification.passed  # (within its bound: ORT's MatMul may round a row apart differently)
    onnx.checker.check_model(result.model, full_check=True)
    kept = _nibbles(result.model)
    assert set(kept) == {"w1", "w2", "z2"}
    assert all(t.SerializeToString() == _nibbles(onnx.load(path))[n].SerializeToString() for n, t in kept.items())


def test_fuse_micro_batch_split_of_a_w4a16_model_keeps_its_4bit_weights(prefill_decode, tmp_path, capsys):
    path, out = prefill_decode[0], tmp_path / "split.onnx"
    # a micro-batch split rewrites the graph (Split, a copy of each op per slice, Concat): the weights stay as read
    argv = ["fuse", str(path), "-o", str(out), "--micro-batches", "2", "--split", "always", "--force"]
    assert main(argv) == 0, capsys.readouterr().err
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    assert {n.op_type for n in model.graph.node} >= {"Split", "Concat"}
    assert {n: t.SerializeToString() for n, t in _nibbles(model).items()} == \
        {n: t.SerializeToString() for n, t in _nibbles(onnx.load(path)).items()}
