"""Shared helpers of the op package tests: fuse a model, generate + build its package, and capture
every fused op's inputs and ONNX Runtime outputs from one run of the fused model on the CPU EP (ORT
inlines the fused functions, so the captured outputs are those of the original subgraphs)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from hexfuse.cli import main as hexfuse_main
from tests.builders import unfolded_activation_target
from hexfuse.graph_passes.spec.model import FusionSpec, load_spec
from hexfuse.op_package.build import build_host
from hexfuse.op_package.host import HostPackage
from hexfuse.op_package.render import render_package
from hexfuse.op_package.writer import write_tree

REPO = Path(__file__).resolve().parents[2]
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = ("squeezenet", "inception_v1", "inception_v2", "resnet50")
# Negative controls: the pass must fuse nothing in them (tests/graph_passes checks why).
NEGATIVE_MODELS = {
    entry["file"] for entry in json.loads((REPO / "models" / "catalog.json").read_text())["models"]
    if not entry["independent_branches"]
}


def source_models() -> list[Path]:
    """Light models from the onnx wheel plus every committed models/*.onnx."""
    found = [LIGHT / f"light_{name}.onnx" for name in LIGHT_MODELS if (LIGHT / f"light_{name}.onnx").exists()]
    return found + sorted((REPO / "models").glob("*.onnx"))


@dataclass
class Case:
    name: str
    fused: Path
    spec: FusionSpec
    package: HostPackage
    values: dict[str, np.ndarray]  # every fused-op input and output, as ORT computed them


def fuse(model: Path, out: Path) -> Path | None:
    """Run the graph pass; None when nothing was fused."""
    # margin 0, scalar allowed: the kernels are under test, HVX or not, not the payoff (on HTP resnet50's
    # groups predict below 10%)
    # activations not folded: see tests/builders.py unfolded_activation_target
    code = hexfuse_main(["fuse", str(model), "-o", str(out), "--no-verify", "--min-gain", "0", "--as-designed", "--allow-scalar",
                         "--target", unfolded_activation_target()])
    assert code == 0, f"hexfuse fuse failed on {model}"
    spec_file = out.with_suffix(".hexfuse.json")
    return out if spec_file.exists() and load_spec(str(spec_file)).fused_ops else None


def _catalog_inputs(model: Path) -> dict:
    catalog = model.parent / "catalog.json"
    if not catalog.exists():
        return {}
    for entry in json.loads(catalog.read_text())["models"]:
        if entry["file"] == model.name:
            return entry.get("input_values", {})
    return {}


def _random_input(info: onnx.ValueInfoProto, how: dict, rng: np.random.Generator) -> np.ndarray:
    t = info.type.tensor_type
    shape = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
    dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
    kind = how.get("kind", "randn" if np.issubdtype(dtype, np.floating) else "randint")
    if kind == "randint":
        return rng.integers(how.get("low", 0), how.get("high", 2), size=shape).astype(dtype)
    if kind == "ones":
        return np.ones(shape, dtype)
    if kind == "const":
        return np.full(shape, how["value"], dtype)
    return rng.standard_normal(shape).astype(dtype)


def capture(source: Path, fused: Path, spec: FusionSpec, seed: int = 0) -> dict[str, np.ndarray]:
    model = onnx.load(str(fused))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    wanted = {t.name: t for op in spec.fused_ops for t in (*op.inputs, *op.outputs)}
    have_out = {o.name for o in model.graph.output}
    for name, t in sorted(wanted.items()):
        if name not in inits and name not in have_out:
            model.graph.output.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), list(t.shape)))
    rng = np.random.default_rng(seed)
    how = _catalog_inputs(source)
    feeds = {i.name: _random_input(i, how.get(i.name, {}), rng) for i in model.graph.input if i.name not in inits}
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(names, feeds)))
    values.update(feeds)
    values.update(inits)
    return {name: values[name] for name in wanted}


def prepare(source: Path, work: Path) -> Case | None:
    work.mkdir(parents=True, exist_ok=True)
    fused = fuse(source, work / f"{source.stem}.onnx")
    if fused is None:
        return None
    spec = load_spec(str(fused.with_suffix(".hexfuse.json")))
    out = write_tree(render_package(spec), work / "pkg")
    package = HostPackage(build_host(out), spec)
    return Case(source.stem, fused, spec, package, capture(source, fused, spec))


def compare(name: str, ours: np.ndarray, ref: np.ndarray) -> str | None:
    """None when equal within the contract: float 1e-5 relative, NaN and infinities where ORT has them,
    quantized 1 LSB, integers exact.

    Float: |ours - ref| <= 1e-5 |ref| + 1e-6 max|ref| (the second term only matters for elements that
    cancel to near zero, where summation order alone changes the relative error)."""
    if ours.shape != ref.shape or ours.dtype != ref.dtype:
        return f"{name}: {ours.dtype}{list(ours.shape)} vs ORT {ref.dtype}{list(ref.shape)}"
    if np.issubdtype(ref.dtype, np.floating):
        finite = np.isfinite(ref)
        if not np.array_equal(np.isnan(ours), np.isnan(ref)) or not np.array_equal(ours[np.isinf(ref)], ref[np.isinf(ref)]):
            return f"{name}: NaN or infinity where ORT has none, or none where ORT has one"
        scale = max(float(np.max(np.abs(ref[finite]))), 1e-30) if finite.any() else 1e-30
        with np.errstate(invalid="ignore"):  # (ours may be infinite where ORT is finite: off, not an error)
            bad = finite & ~(np.abs(ours - ref) <= 1e-5 * np.abs(ref) + 1e-6 * scale)
        if np.any(bad):
            err = float(np.max(np.abs(np.where(finite, ours - ref, 0.0))))
            return f"{name}: {int(bad.sum())} elements off, max abs error {err:.3g} (max |ref| {scale:.3g})"
        return None
    if ref.dtype in (np.uint8, np.int8, np.uint16, np.int16):
        diff = int(np.max(np.abs(ours.astype(np.int64) - ref.astype(np.int64)))) if ref.size else 0
        return None if diff <= 1 else f"{name}: off by {diff} LSB"
    return None if np.array_equal(ours, ref) else f"{name}: integer values differ"


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")
