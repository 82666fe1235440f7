"""What the SDK tests need to build a package for htp_x86 and run it in the HTP simulator."""

from __future__ import annotations

import os
import shutil
from importlib.util import find_spec


def htp_x86_missing() -> str | None:
    """Why the htp_x86 build or the simulator run cannot happen here (None: it can)."""
    if not os.environ.get("QNN_SDK_ROOT"):
        return "QNN_SDK_ROOT not set (the Qualcomm SDK is proprietary and not installed here)"
    if not (os.environ.get("X86_LIBNATIVE_DIR") or os.environ.get("HEXAGON_SDK_ROOT")):
        return "neither HEXAGON_SDK_ROOT nor X86_LIBNATIVE_DIR is set (libnative for the x86 build)"
    if shutil.which(os.environ.get("X86_CXX", "clang++")) is None:
        return "no clang++ (set X86_CXX)"
    if find_spec("onnxruntime_qnn") is None:
        return "onnxruntime-qnn is not installed"
    return None


def last_json(stdout: str):
    """The last line of a helper's stdout that is JSON: the HTP library prints lines of its own there
    ("LIBNATIVE: No alternate configuration ..."), from C stdio, in an order that depends on buffering."""
    import json

    for line in reversed(stdout.strip().splitlines()):
        if line.lstrip().startswith(("{", "[")):
            return json.loads(line)
    raise AssertionError(f"no JSON line in the helper's output: {stdout[-2000:]}")
