"""``hexfuse merge``: two requests in one graph compute what the two models compute, weights stored once,
cross-request groups found by ``hexfuse fuse``, clear one-line refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from tests.passes import fuse_model
from hexfuse.cli import main
from hexfuse.graph_passes.analysis.sources import REQUEST
from hexfuse.graph_passes.merge.requests import merge_models
from hexfuse.graph_passes.rewrite.ort_check import random_inputs
from tests import builders

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
CATALOG = {e["file"]: e for e in json.loads((MODELS / "catalog.json").read_text())["models"]}
sys.path.insert(0, str(ROOT / "tests" / "models"))
from _models_testlib import make_feeds  # noqa: E402


def _run(model: onnx.ModelProto | str | Path, feeds: dict) -> dict[str, np.ndarray]:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def _separately(mapping: dict, paths: list[Path], seed: int) -> tuple[dict, dict]:
    """Run each original on its own inputs; return the merged model's feeds and expected outputs."""
    feeds, want = {}, {}
    for number, (path, request) in enumerate(zip(paths, mapping["requests"])):
        entry = CATALOG.get(path.name)
        own = make_feeds(entry, seed + number) if entry else random_inputs(onnx.load(path), seed + number)
        feeds.update({request["inputs"][name]: value for name, value in own.items()})
        want.update({request["outputs"][name]: value for name, value in _run(path, own).items()})
    return feeds, want


LLAMA = [MODELS / "llama_prefill.onnx", MODELS / "llama_decode.onnx"]
LLAMA_QDQ = [MODELS / "llama_prefill_qdq.onnx", MODELS / "llama_decode_qdq.onnx"]


@pytest.fixture(scope="module")
def merged_llama():
    return merge_models(*LLAMA, ("prefill", "decode"))


def test_merged_llama_equals_running_the_two_models(merged_llama):
    feeds, want = _separately(merged_llama.mapping, LLAMA, seed=4)
    got = _run(merged_llama.model, feeds)
    assert set(got) == set(want) and len(got) == 10
    for name in want:
        assert np.array_equal(got[name], want[name]), name


def test_merged_llama_is_the_hand_built_prefill_decode_bit_for_bit(merged_llama):
    """Same weights, exported apart and merged, or built as one module: the same numbers."""
    feeds = make_feeds(CATALOG["llama_prefill_decode.onnx"], seed=5)
    want = _run(MODELS / "llama_prefill_decode.onnx", feeds)
    renamed = {name.replace("prefill_", "prefill/", 1).replace("decode_", "decode/", 1): v for name, v in feeds.items()}
    got = _run(merged_llama.model, renamed)
    for name, value in got.items():
        assert np.array_equal(value, want[name.replace("/", "_", 1)]), name


def test_weights_are_stored_once_and_names_are_disjoint(merged_llama):
    model = merged_llama.model
    sizes = {init.name: init.ByteSize() for init in model.graph.initializer}
    separate = sum(onnx.load(p).ByteSize() for p in LLAMA)
    assert merged_llama.shared_initializers >= 20 and merged_llama.shared_bytes > 300_000
    assert model.ByteSize() < separate - 300_000
    readers = {name: {n.name.split("/")[0] for n in model.graph.node if name in n.input} for name in sizes}
    assert sum(r == {"prefill", "decode"} for r in readers.values()) == merged_llama.shared_initializers
    graph_io = [i.name for i in model.graph.input] + [o.name for o in model.graph.output]
    assert all(name.startswith(("prefill/", "decode/")) for name in graph_io) and len(set(graph_io)) == len(graph_io)
    assert all(node.name.startswith(("prefill/", "decode/")) for node in model.graph.node)
    onnx.checker.check_model(model, full_check=True)


def test_fused_merged_llama_pairs_matrix_of_one_request_with_vector_of_the_other(merged_llama, tmp_path):
    path = tmp_path / "merged.onnx"
    onnx.save(merged_llama.model, path)
    result = fuse_model(path)
    crossing = []
    for op in result.spec.fused_ops:
        requests = {t.engine: t.nodes[0].name.split("/")[0] for t in op.tasks}
        if op.source == REQUEST:
            assert len({t.nodes[0].name.split("/")[0] for t in op.tasks}) > 1, op.op_type
        if {"matrix", "vector"} <= set(requests) and requests["matrix"] != requests["vector"]:
            crossing.append(op)
    assert len(crossing) >= 5 and all(op.source == REQUEST for op in crossing)
    (tmp_path / "fused.onnx").write_bytes(result.model_bytes)
    again = fuse_model(tmp_path / "fused.onnx")  # idempotent: a fused model is written back unchanged
    assert not again.changed and again.model_bytes == result.model_bytes
    fused = onnx.load_model_from_string(result.model_bytes)
    feeds, want = _separately(merged_llama.mapping, LLAMA, seed=9)
    got = _run(fused, feeds)
    for name in want:
        assert np.allclose(got[name], want[name], rtol=1e-6, atol=1e-6), name


def test_merging_a_model_with_itself_shares_its_weight_not_its_scalars(tmp_path):
    source = builders.save(builders.two_branch(32), tmp_path / "m.onnx")
    merged = merge_models(source, source)
    assert [r["name"] for r in merged.mapping["requests"]] == ["a", "b"]
    names = sorted(init.name for init in merged.model.graph.initializer)
    assert names == ["a/two", "b/two", "w"] and merged.shared_initializers == 1  # scalars stay per request
    feeds, want = _separately(merged.mapping, [Path(source)] * 2, seed=1)
    got = _run(merged.model, feeds)
    assert all(np.array_equal(got[name], want[name]) for name in want)


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_cli_writes_model_and_mapping_byte_identically_and_leaves_inputs_alone(tmp_path, capsys):
    before = [p.read_bytes() for p in LLAMA]
    written = []
    for name in ("x", "y"):
        code, err = _cli(capsys, "merge", *map(str, LLAMA), "-o", str(tmp_path / f"{name}.onnx"), "--names", "prefill", "decode")
        assert code == 0, err
        assert "initializers stored once" in err
        written.append(((tmp_path / f"{name}.onnx").read_bytes(), json.loads((tmp_path / f"{name}.merge.json").read_text())))
    assert written[0][0] == written[1][0]
    mapping = written[0][1]
    assert mapping["requests"][1]["inputs"]["past_key_0"] == "decode/past_key_0"
    assert mapping["requests"][0]["outputs"]["logits"] == "prefill/logits"
    assert [p.read_bytes() for p in LLAMA] == before
    assert sorted(os.listdir(tmp_path)) == ["x.merge.json", "x.onnx", "y.merge.json", "y.onnx"]


def _opset(version: int) -> onnx.ModelProto:
    model = builders.two_branch(16)
    model.opset_import[0].version = version
    return model


def _function_model(body_op: str) -> onnx.ModelProto:
    function = helper.make_function("local", "Act", ["x"], ["y"], [helper.make_node(body_op, ["x"], ["y"])],
                                    [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Act", ["x"], ["y"], domain="local")], "f",
                              [builders.float_info("x", (4,))], [builders.float_info("y", (4,))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[function])
    model.ir_version = 8
    return model


def _fused(tmp_path) -> str:
    source = builders.save(builders.two_branch(96), tmp_path / "plain.onnx")
    result = fuse_model(source)
    (tmp_path / "fused.onnx").write_bytes(result.model_bytes)
    return str(tmp_path / "fused.onnx")


REFUSALS = {
    "opsets": (lambda d: (builders.save(_opset(17), d / "a.onnx"), builders.save(_opset(18), d / "b.onnx")),
               (), "incompatible opsets: a.onnx imports ai.onnx 17 but b.onnx imports ai.onnx 18"),
    "dynamic": (lambda d: (builders.save(builders.two_branch(), d / "a.onnx"), builders.save(builders.dynamic_two_branch(), d / "b.onnx")),
                (), "b.onnx: input 'x' has a symbolic 'batch' dimension on axis 0"),
    "same names": (lambda d: (builders.save(builders.two_branch(), d / "a.onnx"),) * 2, ("--names", "r", "r"),
                   "two requests are named 'r'"),
    "bad name": (lambda d: (builders.save(builders.two_branch(), d / "a.onnx"),) * 2, ("--names", "r/1", "s"),
                 "request name 'r/1' must be 1 to 64 ASCII characters: a letter first"),
    "function clash": (lambda d: (builders.save(_function_model("Relu"), d / "a.onnx"), builders.save(_function_model("Tanh"), d / "b.onnx")),
                       (), "name clash: both models define local function local::Act differently"),
    "already fused": (lambda d: (_fused(d), builders.save(builders.two_branch(), d / "b.onnx")), (), "already fused by hexfuse"),
    "missing": (lambda d: (str(d / "absent.onnx"), builders.save(builders.two_branch(), d / "b.onnx")), (), "no such file"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_bad_pairs_give_one_line_error_and_write_nothing(tmp_path, capsys, case):
    make, extra, expected = REFUSALS[case]
    paths = make(tmp_path)
    before = sorted(os.listdir(tmp_path))
    code, err = _cli(capsys, "merge", paths[0], paths[-1], "-o", str(tmp_path / "out.onnx"), *extra)
    lines = [line for line in err.splitlines() if line.startswith("hexfuse: error:")]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert expected in lines[0], lines[0]
    assert sorted(os.listdir(tmp_path)) == before


def test_refuses_to_overwrite_an_input(tmp_path, capsys):
    source = builders.save(builders.two_branch(), tmp_path / "a.onnx")
    before = Path(source).read_bytes()
    code, err = _cli(capsys, "merge", source, source, "-o", source)
    assert code == 1 and "refusing to overwrite an input model" in err
    assert Path(source).read_bytes() == before


@pytest.mark.skipif(find_spec("onnxruntime_qnn") is None, reason="onnxruntime-qnn is not installed")
def test_merged_and_fused_qdq_llama_match_the_separate_models_on_qnn_htp(tmp_path, capsys):
    code, err = _cli(capsys, "merge", *map(str, LLAMA_QDQ), "-o", str(tmp_path / "merged.onnx"), "--names", "prefill", "decode")
    assert code == 0, err
    code, err = _cli(capsys, "fuse", str(tmp_path / "merged.onnx"), "-o", str(tmp_path / "fused.onnx"), "--as-designed")
    assert code == 0 and " fused nodes" in err, err
    spec = json.loads((tmp_path / "fused.hexfuse.json").read_text())
    assert sum(op["source"] == "request" for op in spec["fused_ops"]) >= 5
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("qnn_requests.py")), str(tmp_path / "fused.onnx"),
         str(tmp_path / "merged.merge.json"), *map(str, LLAMA_QDQ)],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    counts = summary["qnn_nodes"]
    assert counts[str(tmp_path / "fused.onnx")] == sum(counts[str(p)] for p in LLAMA_QDQ) > 0
    assert len(summary["outputs"]) == 10
    for row in summary["outputs"]:
        assert row["max_abs"] == 0.0 and row["max_ref"] > 0, row


def _weight_at_the_edge(kind: str) -> onnx.ModelProto:
    """x + w -> y, with the weight w also a graph output ("output") or an overridable input ("input")."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8), "w")
    info = helper.make_tensor_value_info
    inputs = [info("x", TensorProto.FLOAT, [8, 8])] + ([info("w", TensorProto.FLOAT, [8, 8])] if kind == "input" else [])
    outputs = [info("y", TensorProto.FLOAT, [8, 8])] + ([info("w", TensorProto.FLOAT, [8, 8])] if kind == "output" else [])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g", inputs, outputs, [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("kind", ["output", "input"])
def test_a_weight_at_the_models_edge_keeps_its_prefixed_name(tmp_path, kind):
    """Byte-identical weights are stored once, but not one that is a graph output (the merged model had
    two outputs 'w', unprefixed) or an overridable input (gs made it a constant nobody could feed)."""
    a = builders.save(_weight_at_the_edge(kind), tmp_path / "a.onnx")
    b = builders.save(_weight_at_the_edge(kind), tmp_path / "b.onnx")
    merged = merge_models(a, b, ("a", "b"))
    edge = [i.name for i in merged.model.graph.input] if kind == "input" else [o.name for o in merged.model.graph.output]
    assert {"a/w", "b/w"} <= set(edge) and "w" not in edge and len(edge) == len(set(edge))
    for request in merged.mapping["requests"]:
        names = {**request["inputs"], **request["outputs"]}.values()
        assert set(names) <= {i.name for i in merged.model.graph.input} | {o.name for o in merged.model.graph.output}
    if kind == "input":  # the override reaches its own request only
        session = ort.InferenceSession(merged.model.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {"a/x": np.zeros((8, 8), np.float32), "b/x": np.zeros((8, 8), np.float32), "a/w": np.ones((8, 8), np.float32)}
        values = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        assert np.array_equal(values["a/y"], np.ones((8, 8))) and np.array_equal(values["b/y"], np.arange(64).reshape(8, 8))
