"""The SDK path: `hexfuse oppkg --build htp_x86`, then the QNN EP (HTP simulator, CPU fallback off) with
the package registered claims every fused node and computes what the original computes.

Needs the proprietary Qualcomm AI Engine Direct SDK (QNN_SDK_ROOT, the release of onnxruntime-qnn's
QNN, 2.51) with libnative (HEXAGON_SDK_ROOT or X86_LIBNATIVE_DIR) and clang; skipped otherwise.
Float outputs must match the original run on the same EP within 1e-5 relative. Quantized outputs are
judged against ONNX semantics (the CPU EP without graph optimizations): the fused model on HTP may not
be further from it than the original on HTP, plus one quantization step. (HTP's own quantized kernels
deviate from ONNX semantics by several steps on these models; the fused ops compute them exactly, so
bit-equality with the original run is not a property either side has.)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
import pytest

from hexfuse.cli import main as hexfuse_main
from hexfuse.graph_passes.spec.model import load_spec
from tests.builders import unfolded_activation_target
from tests.htp_x86 import htp_x86_missing, last_json
from tests.op_package.test_chained_qdq import chained_inputs, fuse_chained

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("htp_run.py")
MODELS = ("googlenet", "gptj_block_qdq", "llama_prefill_decode_qdq")


pytestmark = pytest.mark.skipif(htp_x86_missing() is not None, reason=str(htp_x86_missing()))


@pytest.mark.parametrize("name", MODELS)
def test_htp_x86_package_is_claimed_and_matches_the_original(name: str, tmp_path: Path) -> None:
    fused = tmp_path / f"{name}.fused.onnx"
    # every fusable group, scalar kernels too: the package's build, claims and numerics are under test
    # (activations unfolded: QNN folds them into the convs, which qnn_ops.py cannot hand over yet)
    assert hexfuse_main(["fuse", str(ROOT / "models" / f"{name}.onnx"), "-o", str(fused), "--allow-scalar", "--allow-merge-only",
                         "--min-gain", "0", "--as-designed", "--ignore-schedule", "--target", unfolded_activation_target()]) == 0
    result, built = _build_and_run(ROOT / "models" / f"{name}.onnx", fused, tmp_path)
    _check_outputs(result, quantized="qdq" in name)
    spec = load_spec(str(fused.with_suffix(".hexfuse.json")))
    with_matrix = {node for op in spec.fused_ops if any(t.engine == "matrix" for t in op.tasks) for node in op.instances}
    _check_schedules(result["schedules"], name, built, with_matrix)


def test_htp_x86_fused_nodes_chained_through_q_dq(tmp_path: Path) -> None:
    """Issue 19 item 6: a fused node fed by another's output through Q -> DQ (a DQ copy per reader) is
    claimed and computes what the original computes, in both barrier modes."""
    original, fused = fuse_chained(tmp_path)
    assert chained_inputs(onnx.load(fused))
    result, _ = _build_and_run(original, fused, tmp_path)
    _check_outputs(result, quantized=True)
    assert all(ops["tasks"] and ops["matrix"] for ops in result["schedules"]["0"].values()), result["schedules"]


def _build_and_run(original: Path, fused: Path, tmp_path: Path) -> tuple[dict, Path]:
    """Build the fused model's package for htp_x86 and run both models on the QNN EP (htp_run.py)."""
    package = "HexFuse" + "".join(part.title() for part in original.stem.split("_"))
    assert hexfuse_main(["oppkg", str(fused), "-o", str(tmp_path / "pkg"), "--package-name", package,
                         "--build", "htp_x86"]) == 0
    built = next((tmp_path / "pkg" / "build" / "x86_64-linux-clang").glob("*.so"))
    # The op_packages option repeats the library path per op type and ONNX Runtime caps it at 8192 chars.
    short = Path(tempfile.mkdtemp(prefix="hx", dir="/tmp"))
    library = short / built.name
    shutil.copy(built, library)
    op_types = ",".join(op.op_type for op in load_spec(str(fused.with_suffix(".hexfuse.json"))).fused_ops)
    done = subprocess.run([sys.executable, str(HELPER), str(original), str(fused),
                           str(library), package, op_types, str(tmp_path / "schedules")],
                          capture_output=True, text=True, timeout=1800)
    shutil.rmtree(short, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return last_json(done.stdout), built


def _check_outputs(result: dict, quantized: bool) -> None:
    assert result["fused_nodes"] and result["claimed"] == result["fused_nodes"], "a fused node was not claimed"
    for out in result["outputs"]:
        if out["grid"] == 0.0 or not quantized:
            assert out["max_abs"] <= 1e-5 * max(out["max_ref"], 1e-6), out
        else:
            assert out["fused_vs_onnx"] <= out["original_vs_onnx"] + out["grid"] * 1.001, out
    assert result["serial_matches"], "the barrier switch changed the outputs (both modes share every kernel)"


def _check_schedules(schedules: dict, name: str, library: Path, with_matrix: set[str]) -> None:
    """What the HTP scheduler made of every fused node (tools/optrace.py): its matrix work as QNN's own
    ops (on HMX for the quantized models), its other tasks as package ops on HVX threads; with the
    barrier switch on, every task op is the serial variant and is issued after the node's matrix work."""
    concurrent, serial = schedules["0"], schedules["1"]
    assert concurrent and set(concurrent) == set(serial)
    for node, ops in concurrent.items():
        assert ops["tasks"] and all(engine == "hvx" and not op.endswith("_s") for op, engine, *_ in ops["tasks"]), (node, ops)
        if "qdq" in name:  # (QNN may merge a node's projection into a parallel one reading the same input:
            # its op then carries the other node's id, so a node can show no matrix op of its own)
            assert all(engine == "hmx" for _, engine, *_ in ops["matrix"]), (node, ops)
    expected = [node for node in concurrent if any(node.startswith(m) for m in with_matrix)]
    if "qdq" in name:
        assert sum(1 for node in expected if concurrent[node]["matrix"]) >= max(1, len(expected) // 2), concurrent
    for node, ops in serial.items():
        assert all(op.endswith("_s") for op, *_ in ops["tasks"]) or not ops["matrix"], (node, ops)
        if ops["matrix"]:
            last_matrix = max(end for *_, end in ops["matrix"])
            assert all(start > last_matrix for _, _, start, _ in ops["tasks"]), (node, ops)
    # The HTP build carries no matrix kernel of ours: matrix work only ever runs on QNN's own ops.
    symbols = subprocess.run(["nm", "-C", str(library)], capture_output=True, text=True).stdout
    assert "matmul_f32" not in symbols and "conv_f32" not in symbols
