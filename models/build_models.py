#!/usr/bin/env python3
"""Build the small committed ONNX test models of hexfuse (random weights, static shapes).

    python models/build_models.py --out models/

Needs torch (CPU wheel, `pip install torch==2.13.0`), transformers, onnxscript, onnx, onnxruntime.
Nothing else in hexfuse needs torch: the .onnx files and catalog.json are committed and the tests in
tests/models/ only use onnx + onnxruntime + numpy.

Every model is exported with the torch dynamo exporter (torch.onnx.export(..., dynamo=True)) at
opset 18 (the exporter's native opset, so no version conversion happens), optimized by the exporter's
onnxscript optimizer (constant folding, dead-code removal), its node/value metadata stripped, shapes
inferred in strict mode, checked with onnx.checker (full_check) and compared against torch with
onnxruntime's CPU EP.  QDQ variants are made with onnxruntime.quantization and the QNN QDQ config.
Weights are random (fixed seeds); no weights are downloaded.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import sys
import tempfile
import time

import numpy as np
import onnx

OPSET = 18
CATALOG = "catalog.json"

from model_inputs import make_input  # noqa: E402  (models/ is a script directory)
from definitions import SEED, SPECS, Built, _torch  # noqa: E402  (models/ is a script directory)


# ----------------------------------------------------------------------------------------------
# export + checks
# ----------------------------------------------------------------------------------------------


def strip_metadata(model: onnx.ModelProto) -> None:
    """Drop exporter bookkeeping (stack traces, original node names): smaller, deterministic files."""
    for n in model.graph.node:
        del n.metadata_props[:]
        n.doc_string = ""
    for vi in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        del vi.metadata_props[:]
    for init in model.graph.initializer:
        del init.metadata_props[:]
    del model.graph.metadata_props[:]
    del model.metadata_props[:]
    model.doc_string = ""
    model.graph.doc_string = ""


def finalize(model: onnx.ModelProto, meta: dict[str, str]) -> onnx.ModelProto:
    """Re-infer all intermediate shapes (strict), check, return the model with value_info filled in."""
    del model.graph.value_info[:]
    model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    for k, v in meta.items():
        p = model.metadata_props.add()
        p.key, p.value = k, v
    onnx.checker.check_model(model, full_check=True)
    assert_static(model)
    return model


def _shape_of(vi: onnx.ValueInfoProto) -> list:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]


def assert_static(model: onnx.ModelProto) -> None:
    bad = []
    for vi in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        if not vi.type.HasField("tensor_type"):
            bad.append((vi.name, "not a tensor"))
            continue
        s = _shape_of(vi)
        if s is None or any(not isinstance(d, int) or d <= 0 for d in s):
            bad.append((vi.name, s))
    produced = {o for n in model.graph.node for o in n.output if o}
    known = {vi.name for vi in list(model.graph.value_info) + list(model.graph.output)}
    missing = sorted(produced - known)
    if bad or missing:
        raise AssertionError(f"non-static shapes: {bad[:10]}; no inferred shape for {missing[:10]}")


def export_float(built: Built) -> onnx.ModelProto:
    torch = _torch()
    args = tuple(torch.from_numpy(a) for a in example_inputs(built, SEED).values())
    with torch.no_grad():
        prog = torch.onnx.export(
            built.module, args, dynamo=True, opset_version=OPSET, input_names=list(built.inputs),
            output_names=built.output_names, optimize=True, verbose=False, external_data=False,
        )
    model = prog.model_proto
    # second optimizer pass (idempotent in practice; folds anything the first left behind)
    import onnxscript.optimizer

    model = onnxscript.optimizer.optimize(model)
    strip_metadata(model)
    return model


def example_inputs(built: Built, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: make_input(spec, shape, dt, rng) for name, (shape, dt, spec) in built.inputs.items()}


def torch_reference(built: Built, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    torch = _torch()
    with torch.no_grad():
        out = built.module(*(torch.from_numpy(v) for v in feeds.values()))
    if not isinstance(out, (tuple, list)):
        out = (out,)
    return [o.detach().numpy() for o in out]


def ort_run(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    src = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def atomic_write_bytes(path: str, data: bytes) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def quantize_qdq(float_model: onnx.ModelProto, built: Built, n_calib: int, seed: int) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config, qnn_preprocess_model

    class RandomReader(CalibrationDataReader):
        def __init__(self):
            self.feeds = [example_inputs(built, seed + i) for i in range(n_calib)]
            self.i = 0

        def get_next(self):
            if self.i >= len(self.feeds):
                return None
            self.i += 1
            return self.feeds[self.i - 1]

        def rewind(self):
            self.i = 0

    with tempfile.TemporaryDirectory() as td:
        fpath = os.path.join(td, "float.onnx")
        fm = onnx.ModelProto()
        fm.CopyFrom(float_model)
        # onnxruntime 1.32's qnn_preprocess_model crashes on a model that has metadata_props
        # ("TypeError: cannot convert dictionary update sequence element #0 to a sequence"), so drop them.
        del fm.metadata_props[:]
        onnx.save(fm, fpath)
        pre = os.path.join(td, "pre.onnx")
        src = pre if qnn_preprocess_model(fpath, pre) else fpath
        cfg = get_qnn_qdq_config(src, RandomReader(), activation_type=QuantType.QUInt8,
                                 weight_type=QuantType.QUInt8)
        qpath = os.path.join(td, "qdq.onnx")
        quantize(src, qpath, cfg)
        q = onnx.load(qpath)
    strip_metadata(q)
    return q


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def io_entry(model: onnx.ModelProto) -> dict:
    def dt(vi):
        return onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name

    return {
        "inputs": {i.name: _shape_of(i) for i in model.graph.input},
        "dtype": {i.name: dt(i) for i in model.graph.input},
        "outputs": {o.name: _shape_of(o) for o in model.graph.output},
        "output_dtype": {o.name: dt(o) for o in model.graph.output},
    }


def summarize(model: onnx.ModelProto) -> dict:
    hist = collections.Counter(n.op_type for n in model.graph.node)
    return {
        "opset": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "ir_version": model.ir_version,
        "nodes": len(model.graph.node),
        "op_counts": dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def max_rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-12))


def build_all(out_dir: str, n_calib: int = 8) -> dict:
    import onnxruntime
    import torch
    import transformers

    os.makedirs(out_dir, exist_ok=True)
    tool_versions = {
        "torch": torch.__version__, "transformers": transformers.__version__, "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
    }
    entries = []
    for spec in SPECS:
        t0 = time.time()
        built = spec.build()
        model = export_float(built)
        model = finalize(model, {"hexfuse.source": spec.source, "hexfuse.builder": "models/build_models.py"})
        feeds = example_inputs(built, SEED)
        ref = torch_reference(built, feeds)
        got = ort_run(model, feeds)
        assert len(ref) == len(got), (spec.file, len(ref), len(got))
        errs = [max_rel_err(g, r) for g, r in zip(got, ref)]
        assert max(errs) < 1e-4, (spec.file, errs)
        data = model.SerializeToString()
        assert len(data) < 2_000_000, (spec.file, len(data))
        atomic_write_bytes(os.path.join(out_dir, spec.file), data)
        value_specs = {name: s for name, (_, _, s) in built.inputs.items()}
        entry = {
            "file": spec.file, "kind": "float", "architecture": spec.architecture, "source": spec.source,
            **io_entry(model), "input_values": value_specs,
            "independent_branches": spec.independent_branches, "branches": spec.branches,
        }
        if spec.requests:
            entry["requests"] = spec.requests
        entry.update(summarize(model))
        entry.update({"size_bytes": len(data), "sha256": sha256(data),
                      "verified_against_torch_max_rel_err": float(f"{max(errs):.3g}")})
        entries.append(entry)
        print(f"[build] {spec.file}: {len(model.graph.node)} nodes, {len(data)} bytes, "
              f"max rel err vs torch {max(errs):.2e} ({time.time() - t0:.1f}s)", flush=True)

        if spec.qdq:
            t0 = time.time()
            qfile = spec.file.replace(".onnx", "_qdq.onnx")
            q = quantize_qdq(model, built, n_calib, SEED + 100)
            q = finalize(q, {"hexfuse.source": f"QDQ (QNN config, uint8 act / uint8 weight) of {spec.file}",
                             "hexfuse.builder": "models/build_models.py"})
            qgot = ort_run(q, feeds)
            qerrs = [max_rel_err(g, r) for g, r in zip(qgot, got)]
            assert all(np.all(np.isfinite(x)) for x in qgot), qfile
            qdata = q.SerializeToString()
            assert len(qdata) < 2_000_000, (qfile, len(qdata))
            atomic_write_bytes(os.path.join(out_dir, qfile), qdata)
            qentry = {
                "file": qfile, "kind": "qdq", "architecture": spec.architecture,
                "source": f"onnxruntime.quantization.quantize with get_qnn_qdq_config (after qnn_preprocess_model)"
                          f" of {spec.file}",
                "float_model": spec.file,
                "quantization": {"activation": "uint8", "weight": "uint8", "calibrate_method": "MinMax",
                                 "calibration": f"{n_calib} random input sets (input_values specs), seeds "
                                                f"{SEED + 100}..{SEED + 100 + n_calib - 1}"},
                **io_entry(q), "input_values": value_specs,
                "independent_branches": spec.independent_branches, "branches": spec.branches,
            }
            if spec.requests:
                qentry["requests"] = spec.requests
            qentry.update(summarize(q))
            qentry.update({"size_bytes": len(qdata), "sha256": sha256(qdata),
                           "max_rel_err_vs_float": float(f"{max(qerrs):.3g}")})
            entries.append(qentry)
            print(f"[build] {qfile}: {len(q.graph.node)} nodes, {len(qdata)} bytes, "
                  f"max rel err vs float {max(qerrs):.2e} ({time.time() - t0:.1f}s)", flush=True)

    catalog = {
        "about": "Small ONNX models with random weights built by models/build_models.py; see models/README.md."
                 " input_values: how to make valid random inputs (randn | randint[low,high) | ones | const).",
        "build_command": "python models/build_models.py --out models/",
        "exporter": f"torch.onnx.export(dynamo=True, opset_version={OPSET}) + onnxscript optimizer",
        "tool_versions": tool_versions,
        "models": entries,
    }
    atomic_write_bytes(os.path.join(out_dir, CATALOG), (json.dumps(catalog, indent=2) + "\n").encode())
    return catalog


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)), help="output directory")
    ap.add_argument("--calib", type=int, default=8, help="calibration samples for the QDQ models")
    a = ap.parse_args(argv)
    cat = build_all(a.out, a.calib)
    print(f"[build] wrote {len(cat['models'])} models + {CATALOG} to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
