"""`hexfuse compile --inline` says why the QNN EP may log the fused nodes as unsupported before ONNX
Runtime's own (red) lines can appear, not after them."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest

from hexfuse.cli import main

MODEL = Path(__file__).resolve().parents[2] / "models" / "gptj_block_qdq.onnx"


@pytest.mark.skipif(find_spec("onnxruntime_qnn") is None, reason="onnxruntime-qnn not installed (the [qnn] extra)")
def test_inline_says_what_the_unsupported_nodes_are_before_preparing(tmp_path: Path, capfd) -> None:
    fused = tmp_path / "f.onnx"
    assert main(["fuse", str(MODEL), "-o", str(fused), "--as-designed", "--min-gain", "0", "--no-verify"]) == 0
    capfd.readouterr()
    assert main(["compile", str(fused), "-o", str(tmp_path / "ctx.onnx"), "--inline"]) == 0
    err = capfd.readouterr().err
    note = err.index("--inline: the QNN EP has no package for the fused op type(s) HexFuse_")
    assert note < err.index("hexfuse: preparing") and "Unsupported nodes in QNN EP" in err[note:note + 400]
    assert "Unsupported nodes" not in err[:note]
