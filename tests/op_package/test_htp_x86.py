"""The SDK path: build htp_x86 and run a fused model through the QNN EP with op_packages.

Needs the proprietary Qualcomm AI Engine Direct SDK (QNN_SDK_ROOT, matching onnxruntime-qnn's QNN 2.51)
and clang + libc++; skipped otherwise."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.op_package._harness import LIGHT

pytestmark = pytest.mark.skipif(
    not os.environ.get("QNN_SDK_ROOT") or shutil.which("clang++") is None,
    reason="QNN_SDK_ROOT not set (the Qualcomm SDK is proprietary and not installed here) or clang++ missing",
)


def test_htp_x86_package_runs_in_the_qnn_ep(case_for, tmp_path: Path) -> None:
    import onnxruntime as ort
    import onnxruntime_qnn

    from hexfuse.op_package.build import build_htp_x86
    from hexfuse.op_package.render import op_packages_option, render_package
    from hexfuse.op_package.writer import write_tree

    case = case_for(LIGHT / "light_squeezenet.onnx")
    library = build_htp_x86(write_tree(render_package(case.spec), tmp_path / "pkg"))
    option = op_packages_option("HexFuse", [op.op_type for op in case.spec.fused_ops], str(library))
    ort.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    opts = ort.SessionOptions()
    opts.add_provider_for_devices(devices, {"backend_type": "htp", "op_packages": option})
    session = ort.InferenceSession(str(case.fused), opts)
    cpu = ort.InferenceSession(str(case.fused), providers=["CPUExecutionProvider"])
    feed = {i.name: np.random.default_rng(0).standard_normal([d or 1 for d in i.shape]).astype(np.float32)
            for i in cpu.get_inputs() if i.name == "data_0" or i.name == "data"}
    for ours, ref in zip(session.run(None, feed), cpu.run(None, feed)):
        np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)
