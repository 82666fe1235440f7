#!/usr/bin/env python3
"""The published models rebuilt from torchvision and exported to ONNX: float and QDQ w8a8.

    python tools/anchors/zoo.py --out ~/.cache/hexfuse/anchors [resnet18 googlenet ...]

Needs the optional extra ``hexfuse[export]`` (torch, torchvision, onnxscript) plus onnx and onnxruntime;
it imports nothing else of hexfuse, so it runs in a separate exporter environment. For each model:

    torchvision builder (random weights: latency does not depend on values), eval mode
      x in [0, 1] -> (x - mean) / std -> net           as ai-hub-models' ImagenetClassifier wraps it
    torch.onnx.export(dynamo=True, opset 18), 1x3x224x224 float32  ->  <id>.onnx
    onnxruntime.quantization with the QNN QDQ config (qnn_preprocess_model, get_qnn_qdq_config,
      uint8 activations and weights, MinMax on random images)       ->  <id>_w8a8.onnx

as models/build_models.py does for the bundled models. Files that exist are kept (delete to rebuild).
Model files never enter git: the default folder is outside the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

OPSET = 18
SIZE = 224  # ImagenetClassifier input (ai-hub-models); every model of the table uses it
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CALIBRATION_IMAGES = 4
CACHE = Path.home() / ".cache" / "hexfuse" / "anchors"
# the same table published.MODELS reads (this file runs in an exporting Python without hexfuse)
ARCHS: dict[str, str] = json.loads((Path(__file__).with_name("architectures.json")).read_text(encoding="utf-8"))
# torchvision keyword arguments the zoo passes (its model.py): no aux heads, no input transform in the net
KWARGS = {"googlenet": {"transform_input": False, "aux_logits": False, "init_weights": True},
          "inception_v3": {"transform_input": False, "aux_logits": False, "init_weights": True}}


def build(model_id: str):
    import torch
    import torchvision

    torch.manual_seed(0)
    net = getattr(torchvision.models, ARCHS[model_id])(weights=None, **KWARGS.get(model_id, {}))

    class Classifier(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.net = inner
            self.register_buffer("mean", torch.tensor(MEAN).reshape(1, 3, 1, 1))
            self.register_buffer("std", torch.tensor(STD).reshape(1, 3, 1, 1))

        def forward(self, image_tensor):
            return self.net((image_tensor - self.mean) / self.std)

    return Classifier(net).eval()


def export_float(model_id: str, path: Path) -> None:
    import onnx
    import torch

    module = build(model_id)
    example = (torch.rand(1, 3, SIZE, SIZE),)
    with torch.no_grad():
        program = torch.onnx.export(module, example, dynamo=True, opset_version=OPSET, input_names=["image_tensor"],
                                    output_names=["class_logits"], optimize=True, verbose=False, external_data=False)
    model = program.model_proto
    for node in model.graph.node:
        del node.metadata_props[:]
    del model.metadata_props[:]
    model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    onnx.checker.check_model(model)
    _save(model, path)


def export_w8a8(float_path: Path, path: Path) -> None:
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config, qnn_preprocess_model

    class RandomImages(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.feeds = [{"image_tensor": rng.random((1, 3, SIZE, SIZE), dtype=np.float32)}
                          for _ in range(CALIBRATION_IMAGES)]
            self.i = 0

        def get_next(self):
            self.i += 1
            return self.feeds[self.i - 1] if self.i <= len(self.feeds) else None

        def rewind(self):
            self.i = 0

    with tempfile.TemporaryDirectory() as scratch:
        pre = os.path.join(scratch, "pre.onnx")
        source = pre if qnn_preprocess_model(str(float_path), pre) else str(float_path)
        config = get_qnn_qdq_config(source, RandomImages(), activation_type=QuantType.QUInt8,
                                    weight_type=QuantType.QUInt8)
        out = os.path.join(scratch, "qdq.onnx")
        quantize(source, out, config)
        model = onnx.load(out)
    _save(model, path)


def _save(model, path: Path) -> None:
    import onnx

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    onnx.save(model, tmp)
    os.replace(tmp, path)


def paths(out: Path, model_id: str) -> dict[str, Path]:
    return {"float": out / f"{model_id}.onnx", "w8a8": out / f"{model_id}_w8a8.onnx"}


def export(model_id: str, out: Path, precisions: tuple[str, ...] = ("float", "w8a8")) -> dict[str, Path]:
    files = paths(out, model_id)
    if not files["float"].exists():
        export_float(model_id, files["float"])
    if "w8a8" in precisions and not files["w8a8"].exists():
        export_w8a8(files["float"], files["w8a8"])
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help=f"model ids (default: all {len(ARCHS)})")
    parser.add_argument("--out", type=Path, default=CACHE, help=f"cache folder (default {CACHE})")
    parser.add_argument("--float-only", action="store_true")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in ARCHS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r} (known: {', '.join(ARCHS)})")
    failed = 0
    for model_id in args.models or list(ARCHS):
        start = time.time()
        try:
            export(model_id, args.out, ("float",) if args.float_only else ("float", "w8a8"))
            print(f"{model_id}: {time.time() - start:.0f} s", file=sys.stderr)
        except Exception as exc:  # one model failing to export must not stop the others
            failed += 1
            print(f"{model_id}: export failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
