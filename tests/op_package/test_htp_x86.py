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

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hexfuse.cli import main as hexfuse_main
from hexfuse.graph_passes.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("htp_run.py")
MODELS = ("googlenet", "gptj_block_qdq", "llama_prefill_decode_qdq")


def _missing() -> str | None:
    if not os.environ.get("QNN_SDK_ROOT"):
        return "QNN_SDK_ROOT not set (the Qualcomm SDK is proprietary and not installed here)"
    if not (os.environ.get("X86_LIBNATIVE_DIR") or os.environ.get("HEXAGON_SDK_ROOT")):
        return "neither HEXAGON_SDK_ROOT nor X86_LIBNATIVE_DIR is set (libnative for the x86 build)"
    if shutil.which(os.environ.get("X86_CXX", "clang++")) is None:
        return "no clang++ (set X86_CXX)"
    try:
        import onnxruntime_qnn  # noqa: F401
    except ImportError:
        return "onnxruntime-qnn is not installed"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


@pytest.mark.parametrize("name", MODELS)
def test_htp_x86_package_is_claimed_and_matches_the_original(name: str, tmp_path: Path) -> None:
    fused = tmp_path / f"{name}.fused.onnx"
    assert hexfuse_main(["fuse", str(ROOT / "models" / f"{name}.onnx"), "-o", str(fused)]) == 0
    package = "HexFuse" + "".join(part.title() for part in name.split("_"))
    assert hexfuse_main(["oppkg", str(fused), "-o", str(tmp_path / "pkg"), "--package-name", package,
                         "--build", "htp_x86"]) == 0
    built = next((tmp_path / "pkg" / "build" / "x86_64-linux-clang").glob("*.so"))
    # The op_packages option repeats the library path per op type and ONNX Runtime caps it at 8192 chars.
    short = Path(tempfile.mkdtemp(prefix="hx", dir="/tmp"))
    library = short / built.name
    shutil.copy(built, library)
    op_types = ",".join(op.op_type for op in load_spec(str(fused.with_suffix(".hexfuse.json"))).fused_ops)
    done = subprocess.run([sys.executable, str(HELPER), str(ROOT / "models" / f"{name}.onnx"), str(fused),
                           str(library), package, op_types], capture_output=True, text=True, timeout=900)
    shutil.rmtree(short, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["fused_nodes"] and result["claimed"] == result["fused_nodes"], "a fused node was not claimed"
    for out in result["outputs"]:
        if out["grid"] == 0.0 or "qdq" not in name:
            assert out["max_abs"] <= 1e-5 * max(out["max_ref"], 1e-6), out
        else:
            assert out["fused_vs_onnx"] <= out["original_vs_onnx"] + out["grid"] * 1.001, out
