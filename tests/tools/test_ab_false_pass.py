"""A/B never reports a win for a run that did not run where it was asked to (issue: light_inception_v2
fused by the old rewrite ran in 510 partitions, half on CPU after a silent retry, and `ab` printed PASS).

Fast reproduction: a conv + BatchNormalization model in the IR 3 style, fused, with its initializers
listed as graph inputs again as the old rewrite left them. On the QNN EP the BatchNormalization's
parameters are then overridable inputs: it falls back to CPU and the graph splits in three partitions.
"""
from __future__ import annotations

import json

import onnx
import pytest
from ab_testmodels import list_initializers_as_inputs, make_conv_bn_ir3, run_cli

from hexfuse.tools.ab import guards
from hexfuse.tools.ab.qnn_session import QNN_EP, Assignment
from hexfuse.tools.ab.sessions import RunConfig
from tests.builders import unfolded_activation_target

qnn = pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")


@pytest.fixture(scope="module")
def conv_bn(tmp_path_factory) -> tuple[str, str, str]:
    d = tmp_path_factory.mktemp("conv_bn")
    orig, fused, old = d / "orig.onnx", d / "fused.onnx", d / "fused_old_style.onnx"
    onnx.save(make_conv_bn_ir3(), str(orig))
    # on HTP it predicts 9.4% < 10%; activations not folded: see tests/builders.py unfolded_activation_target
    assert run_cli(["fuse", str(orig), "-o", str(fused), "--min-gain", "0", "--as-designed", "--target", unfolded_activation_target()]) == 0
    onnx.save(list_initializers_as_inputs(onnx.load(str(fused))), str(old))
    return str(orig), str(fused), str(old)


def _ab(orig: str, fused: str, out) -> int:
    return run_cli(["ab", orig, fused, "--ep", "qnn", "--iters", "3", "--warmup", "0", "--profile-runs", "1",
                    "-q", "-o", str(out)])


def test_cpu_fallback_of_the_fused_model_fails_in_one_line(conv_bn, tmp_path, capsys):
    orig, _, old = conv_bn
    assert _ab(orig, old, tmp_path / "r") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hexfuse: error: fused (inlined by ORT")
    assert "ran differently from the original on the qnn EP" in err[-1]
    assert "BatchNormalization x1" in err[-1] and "the original 0 nodes on CPU in 1" in err[-1]
    assert not (tmp_path / "r").exists()  # no numbers for a run that ran elsewhere


def test_good_pair_still_passes(conv_bn, tmp_path):
    orig, fused, _ = conv_bn
    assert _ab(orig, fused, tmp_path / "r") == 0
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["equivalence"]["passed"]
    runs = rep["assignment"]
    assert runs["fused_inlined"]["nodes_per_ep"] == runs["b2_original_best"]["nodes_per_ep"] == {QNN_EP: 8}


def _assign(*placed: tuple[str, str, int]) -> Assignment:
    return Assignment([{"ep": ep, "name": f"n{i}", "op_type": op, "domain": "", "subgraph": sg}
                       for i, (ep, op, sg) in enumerate(placed)])


def test_placement_rules():
    cfg = RunConfig("fused_inlined", "fused", "f.onnx", "fused", "qnn")
    ref = _assign((QNN_EP, "Conv", 0), (QNN_EP, "Relu", 0), ("CPUExecutionProvider", "Cast", 1))
    guards.check_placement(cfg, ref, ref)  # same as the original: fine
    fewer = _assign((QNN_EP, "Conv", 0), (QNN_EP, "Relu", 0))
    guards.check_placement(cfg, fewer, ref)  # less CPU work, fewer partitions: fine
    with pytest.raises(Exception, match="2 nodes on CPU"):
        guards.check_placement(cfg, _assign((QNN_EP, "Conv", 0), ("CPUExecutionProvider", "Relu", 1),
                                            ("CPUExecutionProvider", "Cast", 1)), ref)
    with pytest.raises(Exception, match="in 3 partitions"):  # same CPU count, graph cut in more pieces
        guards.check_placement(cfg, _assign((QNN_EP, "Conv", 0), ("CPUExecutionProvider", "Cast", 1),
                                            (QNN_EP, "Relu", 2)), ref)


def test_sessions_never_retry_on_another_ep(monkeypatch):
    """ORT's Python wrapper retries a failed session on CPU unless enable_fallback=0."""
    import onnxruntime as ort

    from hexfuse.tools.ab import sessions
    seen = {}

    class Spy:
        def __init__(self, path, so, providers=None, **kwargs):
            seen.update(kwargs, providers=providers)

    monkeypatch.setattr(ort, "InferenceSession", Spy)
    sessions.make_session(RunConfig("b1_original_seq", "(1)", "m.onnx", "original", "cpu"))
    assert seen["enable_fallback"] == 0 and seen["providers"] == ["CPUExecutionProvider"]
