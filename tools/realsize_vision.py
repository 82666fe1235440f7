"""Vision models at their published input sizes for the real-size bench (issue 23).

- ``anchor:NAME``: a torchvision classifier exported by tools/anchors/zoo.py into ``~/.cache/hexfuse/anchors``
  (224 px, inception_v3 299; ``_w8a8`` = QDQ), with the schedule maps fit_replay keeps in
  ``~/.cache/hexfuse/anchor_maps/NAME.TARGET.json`` (prepared there already; none are made here).
- ``yolov8n:SIZE[:PRECISION]``: a YOLOv8n-style detector (Ultralytics' n scale: widths 16-256, C2f blocks,
  SPPF, PAN neck, decoupled box / class heads at strides 8/16/32; BatchNorm folded; SiLU as x*Sigmoid(x)),
  built with ``onnx.helper`` and seeded random weights, QDQ like the decoder layers; cached beside them.

    image ─ Conv s2 ─ Conv s2 ─ C2f ─ Conv s2 ─ C2f(P3) ─ Conv s2 ─ C2f(P4) ─ Conv s2 ─ C2f ─ SPPF(P5)
    P5 ─ up ─ cat P4 ─ C2f ─ up ─ cat P3 ─ C2f ─► head 8       (each head: box convs ∥ class convs)
                        └──────────── Conv s2 ─ cat ─ C2f ─► head 16 ─ Conv s2 ─ cat P5 ─ C2f ─► head 32
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.realsize import OPSET, PRECISIONS, SEED, _Builder

ANCHORS = Path.home() / ".cache" / "hexfuse" / "anchors"
ANCHOR_MAPS = Path.home() / ".cache" / "hexfuse" / "anchor_maps"
SCHEMA = 1
CLASSES = 80
REG_MAX = 16  # distribution bins per box side (YOLOv8's DFL)
WIDTHS = (16, 32, 64, 128, 256)  # n scale: 0.25 x (64, 128, 256, 512, 1024)
DEPTHS = (1, 2, 2, 1)  # C2f repeats in the backbone (n scale: 0.33 x (3, 6, 6, 3))


@dataclass(frozen=True)
class Anchor:
    """An exported classifier and its cached schedule maps."""

    name: str

    @property
    def stem(self) -> str:
        return self.name

    @property
    def precision(self) -> str:
        return "w8a8" if self.name.endswith("_w8a8") else "float"

    def build(self, cache: Path | None = None) -> Path:
        path = ANCHORS / f"{self.name}.onnx"
        if not path.is_file():
            raise HexfuseError(f"realsize: no exported {path} (python tools/anchors/zoo.py --out {ANCHORS} "
                               f"{self.name.removesuffix('_w8a8')}, in an environment with torchvision)")
        return path

    def engines(self, target: str) -> Path | None:
        path = ANCHOR_MAPS / f"{self.name}.{target}.json"
        return path if path.is_file() else None


@dataclass(frozen=True)
class Detector:
    """A YOLOv8n-style detector at ``size`` x ``size`` pixels."""

    size: int = 640
    precision: str = "w8a8"

    def __post_init__(self) -> None:
        if self.size < 64 or self.size % 32:
            raise HexfuseError(f"realsize: the detector's input size must be a multiple of 32 from 64, got {self.size}")
        if self.precision not in PRECISIONS:
            raise HexfuseError(f"realsize: precision must be one of {PRECISIONS}, got {self.precision!r}")

    @property
    def stem(self) -> str:
        return f"yolov8n_{self.size}_{self.precision}"

    @property
    def key(self) -> str:
        fields = {"schema": SCHEMA, "model": "yolov8n", "size": self.size, "precision": self.precision, "seed": SEED}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def opset(self) -> int:
        return OPSET

    def inputs(self) -> dict[str, tuple[int, ...]]:
        return {"image": (1, 3, self.size, self.size)}

    def engines(self, target: str) -> Path | None:
        return None  # hexfuse engines makes it into the user cache

    def float_model(self) -> onnx.ModelProto:
        return detector_model(self)


class _Net:
    """Conv+SiLU blocks on a _Builder (weights He-scaled so activations stay in range through 60 convs)."""

    def __init__(self, b: _Builder) -> None:
        self.b = b
        self.channels: dict[str, int] = {}

    def conv(self, x: str, cout: int, k: int, s: int, name: str, act: bool = True) -> str:
        b, cin = self.b, self.channels[x]
        w = b.weight(f"{name}_w", (cout, cin, k, k), np.sqrt(2.0 / (cin * k * k)))
        bias = b.const(f"{name}_b", (0.1 * b.rng.standard_normal(cout)).astype(np.float32))
        y = b.op("Conv", [x, w, bias], name, kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4)
        if act:
            y = b.op("Mul", [y, b.op("Sigmoid", [y], f"{name}_sig")], f"{name}_silu")
        self.channels[y] = cout
        return y

    def cat(self, xs: list[str], name: str) -> str:
        y = self.b.op("Concat", xs, name, axis=1)
        self.channels[y] = sum(self.channels[x] for x in xs)
        return y

    def c2f(self, x: str, cout: int, n: int, shortcut: bool, name: str) -> str:
        c = cout // 2
        y = self.conv(x, 2 * c, 1, 1, f"{name}_cv1")
        parts = self.b.op("Split", [y, self.b.ints(f"{name}_halves", [c, c])], f"{name}_split", outputs=2, axis=1)
        for p in parts:
            self.channels[p] = c
        ys = list(parts)
        for i in range(n):
            h = self.conv(self.conv(ys[-1], c, 3, 1, f"{name}_m{i}_cv1"), c, 3, 1, f"{name}_m{i}_cv2")
            if shortcut:
                h = self.b.op("Add", [ys[-1], h], f"{name}_m{i}_add")
                self.channels[h] = c
            ys.append(h)
        return self.conv(self.cat(ys, f"{name}_cat"), cout, 1, 1, f"{name}_cv2")

    def sppf(self, x: str, name: str) -> str:
        c = self.channels[x]
        y = [self.conv(x, c // 2, 1, 1, f"{name}_cv1")]
        for i in range(3):
            y.append(self.b.op("MaxPool", [y[-1]], f"{name}_pool{i}", kernel_shape=[5, 5], strides=[1, 1], pads=[2] * 4))
            self.channels[y[-1]] = c // 2
        return self.conv(self.cat(y, f"{name}_cat"), c, 1, 1, f"{name}_cv2")

    def up(self, x: str, name: str) -> str:
        y = self.b.op("Resize", [x, "", self.b.const(f"{name}_scales", np.array([1, 1, 2, 2], np.float32))], name,
                      mode="nearest")
        self.channels[y] = self.channels[x]
        return y

    def head(self, x: str, name: str) -> str:
        """Decoupled head: box regression and classification, two independent conv chains."""
        box_c, cls_c = max(16, self.channels["image_p3"] // 4, 4 * REG_MAX), max(self.channels["image_p3"], CLASSES)
        box = self.conv(self.conv(self.conv(x, box_c, 3, 1, f"{name}_box0"), box_c, 3, 1, f"{name}_box1"),
                        4 * REG_MAX, 1, 1, f"{name}_box2", act=False)
        cls = self.conv(self.conv(self.conv(x, cls_c, 3, 1, f"{name}_cls0"), cls_c, 3, 1, f"{name}_cls1"),
                        CLASSES, 1, 1, f"{name}_cls2", act=False)
        return self.cat([box, cls], f"{name}_out")


def detector_model(det: Detector) -> onnx.ModelProto:
    b = _Builder(np.random.default_rng(SEED))
    net = _Net(b)
    net.channels["image"] = 3
    w, d = WIDTHS, DEPTHS
    x = net.conv(net.conv("image", w[0], 3, 2, "stem0"), w[1], 3, 2, "stem1")
    x = net.c2f(x, w[1], d[0], True, "b2")
    p3 = net.c2f(net.conv(x, w[2], 3, 2, "b3_down"), w[2], d[1], True, "b3")
    p4 = net.c2f(net.conv(p3, w[3], 3, 2, "b4_down"), w[3], d[2], True, "b4")
    p5 = net.sppf(net.c2f(net.conv(p4, w[4], 3, 2, "b5_down"), w[4], d[3], True, "b5"), "sppf")
    net.channels["image_p3"] = w[2]  # the head widths follow the finest level's channels
    n4 = net.c2f(net.cat([net.up(p5, "up5"), p4], "n4_in"), w[3], 1, False, "n4")
    o3 = net.c2f(net.cat([net.up(n4, "up4"), p3], "n3_in"), w[2], 1, False, "n3")
    o4 = net.c2f(net.cat([net.conv(o3, w[2], 3, 2, "n3_down"), n4], "o4_in"), w[3], 1, False, "o4")
    o5 = net.c2f(net.cat([net.conv(o4, w[3], 3, 2, "o4_down"), p5], "o5_in"), w[4], 1, False, "o5")
    outs = [net.head(o, f"head{s}") for o, s in ((o3, 8), (o4, 16), (o5, 32))]

    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("image", f32, [1, 3, det.size, det.size])]
    outputs = [helper.make_tensor_value_info(o, f32, [1, 4 * REG_MAX + CLASSES, det.size // s, det.size // s])
               for o, s in zip(outs, (8, 16, 32))]
    graph = helper.make_graph(b.nodes, det.stem, inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", det.opset)], producer_name="hexfuse.realsize")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def parse_vision(text: str) -> Anchor | Detector | None:
    """'anchor:resnet50_w8a8' / 'yolov8n:640[:w8a8]'; None for anything else (a decoder layer)."""
    parts = text.split(":")
    if parts[0] == "anchor":
        if len(parts) != 2 or not parts[1]:
            raise HexfuseError(f"realsize: expected anchor:NAME (a model in {ANCHORS}), got {text!r}")
        return Anchor(parts[1])
    if parts[0] == "yolov8n":
        if len(parts) not in (2, 3) or not parts[1].isdigit():
            raise HexfuseError(f"realsize: expected yolov8n:SIZE[:PRECISION], got {text!r}")
        return Detector(int(parts[1]), *parts[2:])
    return None
