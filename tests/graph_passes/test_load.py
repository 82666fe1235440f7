"""A model whose weights are most of its bytes: onnx's shape inference (the load) and function inliner
(verification) run without the weights' data and give the same model, byte for byte, as over the whole
model (graph_passes/load/weights.py); and where a file is heavy for its nodes, the load asks its
tensors, not its bytes, whether one keeps its data outside (graph_passes/load/model.py); the pass reads the
inferred types without the weights' data given back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.inliner
import pytest
from onnx import TensorProto, helper, numpy_helper

from hexfuse.graph_passes.load import model as load
from hexfuse.graph_passes.load.weights import without_weights

WIDTH = 1536  # one float weight of 9.4 MB: over the size where the weights are left out of inference


def _weighty_model(width: int = WIDTH) -> onnx.ModelProto:
    """x @ W, reshaped to the shape of another input (known by data propagation), then Relu; W is most of the bytes."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
        helper.make_node("Shape", ["like"], ["target"], name="shape"),
        helper.make_node("Reshape", ["y", "target"], ["z"], name="reshape"),
        helper.make_node("Relu", ["z"], ["out"], name="relu"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width]),
              helper.make_tensor_value_info("like", TensorProto.FLOAT, [2, width // 2])]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, width // 2])]
    graph = helper.make_graph(nodes, "weighty", inputs, outputs, [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _whole_model_inference(raw: bytes) -> bytes:
    return onnx.shape_inference.infer_shapes(raw, check_type=True, strict_mode=True, data_prop=True).SerializeToString()


@pytest.fixture
def inferred_sizes(monkeypatch) -> list[int]:
    """The byte size of every model shape inference is given during the test."""
    sizes: list[int] = []
    real = onnx.shape_inference.infer_shapes

    def spy(model, *args, **kwargs):
        sizes.append(len(model) if isinstance(model, bytes) else model.ByteSize())
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", spy)
    return sizes


def test_weights_left_out_of_inference_give_the_same_inferred_model(tmp_path: Path, inferred_sizes: list[int]) -> None:
    path = tmp_path / "weighty.onnx"
    onnx.save(_weighty_model(), path)
    raw = path.read_bytes()
    assert len(raw) > 1 << 23
    loaded = load.load_model(path)
    assert inferred_sizes and max(inferred_sizes) < len(raw) // 100  # inference never saw the weights
    expected = _whole_model_inference(raw)
    assert loaded.inferred.SerializeToString() == expected
    shapes = {info.name: [d.dim_value for d in info.type.tensor_type.shape.dim] for info in loaded.inferred.graph.value_info}
    assert shapes["z"] == [2, WIDTH // 2]  # data propagation through Shape still ran


def test_the_pass_reads_the_types_and_leaves_the_weights_out(tmp_path: Path) -> None:
    """The analysis reads ``typed`` alone; ``inferred`` gives the data back on first use, once."""
    from hexfuse import analyze_model

    path = tmp_path / "weighty.onnx"
    onnx.save(_weighty_model(), path)
    loaded = analyze_model(path).loaded
    assert loaded.left_out is not None and loaded.left_out.positions == (0,)  # the whole pass ran without them
    assert loaded.typed.graph.initializer[0].raw_data == b""
    assert loaded.inferred is loaded.typed and not loaded.left_out.positions
    assert loaded.typed.graph.initializer[0].raw_data == loaded.model.graph.initializer[0].raw_data


def test_the_light_copy_carries_every_field_but_the_weights_data() -> None:
    """Copied field by field: with the data given back, the copy is the model byte for byte."""
    from hexfuse.graph_passes.load.weights import _light_copy

    model = _weighty_model(width=64)
    model.doc_string, model.producer_name, model.model_version = "doc", "test", 7
    helper.set_model_props(model, {"key": "value"})
    model.graph.doc_string = "graph doc"
    model.graph.value_info.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64]))
    weight = model.graph.initializer[0]
    weight.doc_string = "weight doc"
    weight.metadata_props.add(key="origin", value="test")
    model.functions.append(helper.make_function("hexfuse.test", "Id", ["a"], ["b"], [helper.make_node("Identity", ["a"], ["b"])],
                                                [helper.make_opsetid("", 17)]))
    light = _light_copy(model, frozenset({0}))
    assert light.graph.initializer[0].raw_data == b"" and light.graph.initializer[0].HasField("raw_data")
    light.graph.initializer[0].raw_data = weight.raw_data
    assert light.SerializeToString() == model.SerializeToString()


def test_inference_without_weights_failing_falls_back_to_the_whole_model(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "weighty.onnx"
    onnx.save(_weighty_model(), path)
    raw = path.read_bytes()
    real = onnx.shape_inference.infer_shapes

    def refuse_light(model, *args, **kwargs):
        if isinstance(model, bytes) and len(model) < len(raw) // 2:
            raise onnx.shape_inference.InferenceError("refused for the test")
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", refuse_light)
    assert load.load_model(path).inferred.SerializeToString() == _whole_model_inference(raw)


def test_functions_inlined_without_the_weights_give_the_same_model() -> None:
    model = _weighty_model()
    body = [helper.make_node("Relu", ["a"], ["b"])]
    model.functions.append(helper.make_function("hexfuse.test", "Twice", ["a"], ["b"], body,
                                                [helper.make_opsetid("", 17)]))
    model.opset_import.append(helper.make_opsetid("hexfuse.test", 1))
    model.graph.node[-1].CopyFrom(helper.make_node("Twice", ["z"], ["out"], name="call", domain="hexfuse.test"))
    whole = onnx.inliner.inline_local_functions(model)
    light = without_weights(model, model.ByteSize(), onnx.inliner.inline_local_functions)
    assert light is not None and light.SerializeToString() == whole.SerializeToString()
    assert [node.op_type for node in light.graph.node][-1] == "Relu"  # inlined


def test_small_models_are_inferred_whole(tmp_path: Path, inferred_sizes: list[int]) -> None:
    path = tmp_path / "small.onnx"
    onnx.save(_weighty_model(width=64), path)
    load.load_model(path)
    assert inferred_sizes == [len(path.read_bytes())]


def test_external_data_is_found_in_a_file_of_few_nodes_for_its_bytes(tmp_path: Path) -> None:
    """A file this heavy per node asks its tensors whether one is external instead of searching its bytes."""
    rng = np.random.default_rng(1)
    inline = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w_inline")  # 16 KB
    external = numpy_helper.from_array(rng.standard_normal((64, 128)).astype(np.float32), "w_external")  # 32 KB
    nodes = [helper.make_node("MatMul", ["x", "w_inline"], ["y"], name="mm0"),
             helper.make_node("MatMul", ["y", "w_external"], ["out"], name="mm1")]
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 128])], [inline, external])
    path = tmp_path / "mixed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path,
              save_as_external_data=True, location="mixed.data", size_threshold=20000)
    raw = path.read_bytes()
    assert len(raw) > load._BYTES_PER_NODE_TO_WALK * len(nodes)  # the tensors are asked
    loaded = load.load_model(path)
    assert loaded.external == ((tmp_path / "mixed.data").resolve(),)
    weights = {init.name: numpy_helper.to_array(init) for init in loaded.model.graph.initializer}
    np.testing.assert_array_equal(weights["w_external"], numpy_helper.to_array(external))
