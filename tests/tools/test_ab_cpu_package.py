"""Baselines 3 and 4 measured on the CPU EP: the fused nodes run on the host executor inside ONNX Runtime.

Needs ONNX Runtime's C API headers (`python -m hexfuse.op_package.ort_headers`, run by .ci/run) and a C++
compiler; without them these tests skip and say why.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ab_testmodels import run_cli

from hexfuse.graph_passes.cost.target import FOLDS, target_to_dict
from hexfuse.graph_passes.spec.model import load_spec
from hexfuse.op_package import ort_headers
from hexfuse.op_package.ort_build import cached_ort_library, op_table_source
from hexfuse.tools.ab import libkind
from hexfuse.tools.ab.inputs import random_inputs
from hexfuse.tools.ab.models import fused_nodes, graph_inputs, write_serial_variant
from hexfuse.tools.ab.per_node import split_spec, write_split_model
from tests.cost.specs import estimated

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["googlenet.onnx", "llama_prefill_decode.onnx"]

needs_build = pytest.mark.skipif(
    ort_headers.find_headers() is None or shutil.which("g++") is None,
    reason=f"no ONNX Runtime C API headers or no g++: {ort_headers.FETCH_HINT}")


@pytest.fixture(scope="module")
def fused(tmp_path_factory) -> dict[str, tuple[str, str]]:
    d = tmp_path_factory.mktemp("cpu_pkg")
    estimates = d / "sm8550_estimates.json"  # the pre-fit figures, under which the bundled models fuse
    unfolded = estimated("sm8550").folds - set(FOLDS["activation"])
    estimates.write_text(json.dumps(target_to_dict(estimated("sm8550").with_values(folds=unfolded))))
    out = {}
    for name in MODELS:
        original, target = str(ROOT / "models" / name), str(d / name)
        # activations not folded (tests/builders.py unfolded_activation_target), pre-fit figures
        assert run_cli(["fuse", original, "-o", target, "--target", str(estimates), "--as-designed"]) == 0
        out[name] = (original, target)
    return out


def _session(path: str, library: str | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if library:
        so.register_custom_ops_library(library)
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


@needs_build
@pytest.mark.parametrize("name", MODELS)
def test_custom_op_run_equals_the_original(fused, tmp_path, name):
    original, model = fused[name]
    lib = str(cached_ort_library(load_spec(str(Path(model).with_suffix(".hexfuse.json")))))
    assert libkind.library_kind(lib).kind == libkind.ORT
    feeds = random_inputs(graph_inputs(onnx.load(original)), seed=3)
    want = _session(original).run(None, feeds)
    spec = load_spec(str(Path(model).with_suffix(".hexfuse.json")))
    split_lib = str(cached_ort_library(split_spec(spec)))
    split_model, counts = write_split_model(model, spec, tmp_path / "per_node.onnx")
    # one custom-op node per original node of every fused node (a shared op type splits once per instance)
    assert sum(counts.values()) == sum(len(op.instances) * len(t.nodes) for op in spec.fused_ops for t in op.tasks)
    runs = [(write_serial_variant(model, serial, tmp_path / f"v{serial}.onnx", drop_functions=True), lib)
            for serial in (1, 0)] + [(split_model, split_lib)]
    for variant, library in runs:
        got = _session(str(variant), library).run(None, feeds)
        for a, b in zip(want, got):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


@needs_build
def test_without_the_library_a_fused_node_cannot_run(fused, tmp_path):
    """Functions dropped: no silent inlining, the session refuses the unknown op."""
    _, model = fused["googlenet.onnx"]
    variant = write_serial_variant(model, 0, tmp_path / "v.onnx", drop_functions=True)
    assert not onnx.load(str(variant)).functions
    with pytest.raises(Exception, match="HexFuse_"):
        _session(str(variant))


@needs_build
@pytest.mark.parametrize("name", MODELS)
def test_ab_cpu_reports_four_measured_baselines(fused, tmp_path, name):
    original, model = fused[name]
    out = tmp_path / "r"
    assert run_cli(["ab", original, model, "--iters", "8", "--warmup", "1", "--profile-runs", "1", "-q",
                    "-o", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    rows = {b["key"]: b for b in rep["baselines"]}
    for key in ("b1_original_seq", "b2_original_best", "b3_fused_serial", "b4_fused_concurrent",
                "b1k_original_host_kernels"):
        assert rows[key]["available"] and rows[key]["latency"]["n"] == 8 and rows[key]["latency"]["median_ms"] > 0
    for gain in ("entry_merge_gain_1_to_3", "entry_merge_gain_same_kernels_1k_to_3", "overlap_gain_3_to_4"):
        sp = rep["speedups"][gain]
        assert sp["ci95"][0] <= sp["speedup"] <= sp["ci95"][1] and sp["n_boot"] > 0
    assert "kernels differ" in rep["speedups"]["entry_merge_gain_1_to_3"]["note"]
    assert rep["speedups"]["overlap_gain_3_to_4"]["note"] == ""
    assert rep["speedups"]["entry_merge_gain_same_kernels_1k_to_3"]["note"] == ""  # like for like
    assert rep["equivalence"]["runs"]["b1k_original_host_kernels"]["passed"]
    assert rep["headline"]["candidate"] == "b4_fused_concurrent"
    assert all(rep["equivalence"]["runs"][k]["passed"] for k in ("b3_fused_serial", "b4_fused_concurrent"))
    count = len(fused_nodes(onnx.load(model, load_external_data=False)))
    for key in ("b3_fused_serial", "b4_fused_concurrent"):  # every fused node ran as one custom-op node
        nodes = rep["assignment"][key]["nodes"]
        assert sum(n["op_type"].startswith("HexFuse_") and n["ep"] == "CPUExecutionProvider" for n in nodes) == count
    assert rep["engines"]["b4_fused_concurrent"]["per_engine"]["fused"]["ops"] == count


def test_without_a_spec_baselines_3_and_4_say_why(tiny_pair, tmp_path):
    orig, fused_model = tiny_pair
    assert run_cli(["ab", orig, fused_model, "--iters", "2", "--warmup", "0", "-q", "-o", str(tmp_path / "r")]) == 0
    rows = {b["key"]: b for b in json.loads((tmp_path / "r" / "report.json").read_text())["baselines"]}
    assert not rows["b3_fused_serial"]["available"] and "no fusion spec" in rows["b3_fused_serial"]["reason"]


def test_op_table_source_escapes_names_and_lists_ports():
    from hexfuse.graph_passes.spec.model import FusedOp, FusionSpec, NodeSpec, TaskSpec, TensorSpec
    x, y = TensorSpec("x", "float32", (2, 3)), TensorSpec("y", "int64", ())
    task = TaskSpec("t", "vector", (NodeSpec("a", "Relu", "", ("x",), ("y",)),), ("x",), ("y",))
    op = FusedOp('HexFuse_0_"evil"\n', "n", (x,), (y,), (task,), (x, y))
    src = op_table_source(FusionSpec("m.onnx", "0" * 64, "sm8550", (op,)))
    assert '"HexFuse_0_\\"evil\\"\\n"' in src  # a C string literal, never the raw name
    assert "const int64_t in0_0[] = {2, 3};" in src and "{1, 2, in0_0}" in src  # float32 = 1, rank 2
    assert "{7, 0, out0_0}" in src  # int64 = 7, a scalar
