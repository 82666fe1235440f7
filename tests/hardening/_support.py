"""Shared helpers of the hardening tests: run the CLI in-process, read its one error line, build
small models with chosen names, and list what a folder holds."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hexfuse.cli import main
from tests import builders


def run(capsys, *argv: str) -> tuple[int, str]:
    """(exit code, stderr) of one in-process ``hexfuse`` run."""
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def one_error(err: str) -> str:
    """The single ``hexfuse: error:`` line of a failed run; fails on tracebacks or several lines."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("hexfuse: error:")]
    assert len(lines) == 1, err
    assert "internal error" not in lines[0], lines[0]  # a known case must have its own message
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes): proves nothing else changed."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def temporaries(folder: Path) -> list[str]:
    """Leftovers of interrupted writes: write_files' ``.NAME.*.tmp`` and write_tree's hidden stages."""
    return sorted(p.name for p in folder.rglob(".*") if p.name.endswith(".tmp") or p.is_dir())


def spec_matches_model(model: Path) -> bool:
    """The spec beside ``model`` carries the model's hash (one run wrote both)."""
    spec = json.loads(model.with_suffix(".hexfuse.json").read_text())
    return spec["model_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()


def named_two_branch(names: list[str], size: int = 16) -> onnx.ModelProto:
    """builders.two_branch with every tensor and node named from ``names``:
    [x, w, y, sm, two, s, matmul node, softmax node, mul node] (tensor names distinct)."""
    x, w, y, sm, two, s, n_mm, n_sm, n_mul = names
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", [x, w], [y], name=n_mm),
        helper.make_node("Softmax", [x], [sm], name=n_sm, axis=-1),
        helper.make_node("Mul", [sm, two], [s], name=n_mul),
    ]
    inits = [numpy_helper.from_array(rng.standard_normal((size, size)).astype(np.float32), w),
             numpy_helper.from_array(np.array(2.0, np.float32), two)]
    info = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [size, size])  # noqa: E731
    return builders._model(nodes, [info(x)], [info(y), info(s)], inits)
