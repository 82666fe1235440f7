"""Per-target engine figures (qnn_configs/targets/*.json): load, validate, look up.

A target file is flat: every figure is ``{"value": number, "source": "<public doc/URL>" | "estimate: why"}``.
Numbers Qualcomm does not publish (HMX MACs/cycle, HTP clock, dispatch cost) are marked estimates with
the reasoning that produced them; ``hexfuse calibrate`` refits the per-op-class factors from a
measured profile.  A bad file fails with one line naming the file and the field.
"""

from __future__ import annotations

import importlib.resources
import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from hexfuse.graph_passes.errors import HexfuseError

TARGETS_DIR = Path(str(importlib.resources.files("hexfuse.qnn_configs"))) / "targets"
ALIASES = {
    "v73": "sm8550", "8gen2": "sm8550", "v75": "sm8650", "8gen3": "sm8650", "v79": "sm8750", "8elite": "sm8750",
    "xelite": "x-elite", "x1e": "x-elite",
}
# Epilogues a target may fold into the matrix op before them (graph_passes/graph/folds.py), by JSON key.
# "activation" is graph_passes/graph/folds.py ACTIVATIONS (tests/graph_passes/test_fold_agreement.py holds them equal).
FOLDS = {"batch_norm": ("BatchNormalization",), "scale_shift": ("Mul", "Add"),
         "activation": ("Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Gelu")}
# Op classes that calibration can scale (opcost.op_class names them).
OP_CLASSES = (
    "conv", "matmul", "depthwise", "elementwise", "transcendental", "norm", "softmax", "pool", "reduce",
    "datamove", "other",
)


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    clock_ghz: float  # HTP core clock
    hmx_int8_macs_per_cycle: float
    hmx_fp16_macs_per_cycle: float
    hmx_tile: int  # HMX works on tile x tile blocks; smaller dims are padded
    hvx_contexts: int  # HVX contexts the scheduler may split between tasks
    hvx_bytes_per_cycle: float  # streaming bytes per cycle per context (elementwise, 8-bit)
    hvx_int8_macs_per_cycle: float  # per context, for convs that fall back to HVX (depthwise)
    dma_gbps: float  # one DMA engine, DDR<->VTCM or VTCM<->VTCM
    ddr_gbps: float  # LPDDR peak, shared with the rest of the SoC
    ddr_npu_fraction: float  # share of ddr_gbps the NPU sustains
    vtcm_mb: float
    resident_mb: float  # activations up to this size stay in VTCM between ops; larger ones go to DDR
    dispatch_ns: float  # per graph op: QNN sequencing, VTCM bookkeeping, launch of the op
    launch_ns: float  # per micro-op inside a fused entry: queue push + wait
    hvx_launch_ns: float  # per op run on an HVX thread (QNN's own and hexfuse task ops): launch + wait at its gate
    op_hvx_contexts: int  # HVX contexts one HVX op runs on (a package task op; QNN's own unsliced ops)
    qnn_op_ns: float  # replay of QNN's schedule: each main-thread QNN op's own time (cost/replay.py)
    qnn_hvx_op_ns: float  # replay: each HVX-list QNN op's launch and wait (an op of vision size: see below)
    qnn_op_floor_fraction: float  # replay: an op with no work costs this share of qnn_op_ns / qnn_hvx_op_ns ...
    qnn_op_half_ns: float  # ... and an op whose work is this many ns costs half way to the full constant
    ddr_sustained_fraction: float  # replay: share of ddr_gbps all of a graph's ops sustain together (its DDR floor)
    qnn_hvx_rate_scale: float  # replay: QNN's own kernels move bytes this many times hvx_bytes_per_cycle
    hmx_a16_rate_fraction: float  # HMX with 16-bit activations (w8a16, w4a16) at this share of the 8-bit rate
    graph_execute_ns: float  # whole-model times: each graph execution's cost outside its ops (the runtime's call)
    pack_bytes_per_cycle: float  # HVX, per context: requant/layout of HMX outputs
    dequant_bytes_per_cycle: float  # HVX, per context: dequant of non-prepacked (dynamic) HMX weights
    factors: dict[str, float] = field(default_factory=dict)  # op class -> calibrated time factor
    folds: frozenset[str] = frozenset()  # op types folded into a preceding matrix op (FOLDS)
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    path: str = field(default="", compare=False)

    @property
    def hvx_ns_per_byte(self) -> float:
        return 1.0 / (self.hvx_bytes_per_cycle * self.clock_ghz)

    @property
    def ddr_bytes_per_ns(self) -> float:
        return self.ddr_gbps * self.ddr_npu_fraction

    @property
    def dma_bytes_per_ns(self) -> float:
        return self.dma_gbps

    @property
    def ddr_sustained_bytes_per_ns(self) -> float:
        """The replay's DDR: what a graph's ops sustain together (its DMA engine and its floor)."""
        return self.ddr_gbps * self.ddr_sustained_fraction

    @property
    def vtcm_bytes(self) -> int:
        return int(self.vtcm_mb * 2**20)

    @property
    def resident_bytes(self) -> int:
        return int(self.resident_mb * 2**20)

    def factor(self, op_class: str) -> float:
        return self.factors.get(op_class, 1.0)

    def with_values(self, **changes: Any) -> Target:
        """A copy with some figures changed (tests, calibration, what-if studies)."""
        return replace(self, **changes)


_NUMERIC = [f.name for f in fields(Target) if f.type in ("float", "int")]
_INTEGER = {f.name for f in fields(Target) if f.type == "int"}
_INTEGER_MAX = 1024  # threads and tile rows: the quota search enumerates splits of them (4 and 32 today)
_FRACTIONS = {"ddr_npu_fraction", "qnn_op_floor_fraction", "ddr_sustained_fraction", "hmx_a16_rate_fraction"}
# Figures added after target files were first written (a file without them still loads, with these).
OPTIONAL = {
    "hvx_launch_ns": (300.0, "estimate (default): one launch/wait pair of the HTP scheduler per HVX op; "
                             "`hexfuse calibrate` fits it"),
    "op_hvx_contexts": (1, "estimate (default): an HVX op runs on the one HVX thread it is launched on (no threads "
                           "inside an op: ../shared/DESIGN.md section 5)"),
    "qnn_op_ns": (1500.0, "estimate (default): as dispatch_ns, per QNN op on the main thread; tools/bench/fit_replay.py fits "
                          "it to published latencies"),
    "qnn_hvx_op_ns": (300.0, "estimate (default): as hvx_launch_ns, per QNN op on the HVX list; tools/bench/fit_replay.py "
                             "fits it"),
    "qnn_op_floor_fraction": (1.0, "default: every QNN op costs the whole per-op constant whatever its size (the "
                                   "replay before issue 43); tools/bench/fit_replay.py fits it"),
    "qnn_op_half_ns": (1000.0, "default (no effect while qnn_op_floor_fraction is 1); tools/bench/fit_replay.py fits it"),
    "qnn_hvx_rate_scale": (1.0, "default: QNN's kernels stream at hvx_bytes_per_cycle; tools/bench/fit_replay.py fits it"),
    "hmx_a16_rate_fraction": (1.0, "default: 16-bit activations at the 8-bit HMX rate; tools/bench/fit_replay.py --joint "
                                   "fits the share"),
    "graph_execute_ns": (1.0, "default: nothing per graph execution beyond its ops; tools/bench/fit_replay.py --joint fits "
                              "it"),
    "ddr_sustained_fraction": (1.0, "default: the replay is never faster than its DDR bytes at peak bandwidth; "
                                    "tools/bench/fit_replay.py fits the share sustained"),
}


def _fail(where: str, field_name: str, problem: str) -> HexfuseError:
    return HexfuseError(f"target {where}: field {field_name!r}: {problem}")


def _figure(raw: dict[str, Any], name: str, where: str) -> tuple[float, str]:
    if name not in raw:
        raise _fail(where, name, "missing")
    entry = raw[name]
    if not isinstance(entry, dict) or set(entry) != {"value", "source"}:
        raise _fail(where, name, 'expected {"value": number, "source": text}')
    value, source = entry["value"], entry["source"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(where, name, f"value must be a finite number, got {value!r}")
    if name in _INTEGER and (int(value) != value or not 0 < value <= _INTEGER_MAX):
        raise _fail(where, name, f"value must be an integer from 1 to {_INTEGER_MAX}, got {value!r}")
    if value <= 0 or (name in _FRACTIONS and value > 1):
        raise _fail(where, name, f"value {value!r} out of range ({'(0, 1]' if name in _FRACTIONS else '> 0'})")
    if not isinstance(source, str) or not source.strip():
        raise _fail(where, name, "source must name a public document/URL or say 'estimate'")
    return (int(value) if name in _INTEGER else float(value)), source


def _factors(raw: dict[str, Any], where: str) -> tuple[dict[str, float], dict[str, str]]:
    table = raw.get("factors", {})
    if not isinstance(table, dict):
        raise _fail(where, "factors", "expected an object of op class -> figure")
    factors: dict[str, float] = {}
    sources: dict[str, str] = {}
    for op_class in table:
        if op_class not in OP_CLASSES:
            raise _fail(where, f"factors.{op_class}", f"unknown op class (known: {', '.join(OP_CLASSES)})")
        value, source = _figure(table, op_class, where)
        factors[op_class], sources[f"factors.{op_class}"] = float(value), source
    return factors, sources


def _folds(raw: dict[str, Any], where: str) -> tuple[frozenset[str], dict[str, str]]:
    """``"folds": {"batch_norm": {"value": true, "source": "..."}, ...}``: which epilogues fold, and why we think so."""
    table = raw.get("folds", {})
    if not isinstance(table, dict):
        raise _fail(where, "folds", "expected an object of epilogue -> {value, source}")
    ops: set[str] = set()
    sources: dict[str, str] = {}
    for key, entry in table.items():
        if key not in FOLDS:
            raise _fail(where, f"folds.{key}", f"unknown epilogue (known: {', '.join(FOLDS)})")
        if not isinstance(entry, dict) or set(entry) != {"value", "source"} or not isinstance(entry["value"], bool):
            raise _fail(where, f"folds.{key}", 'expected {"value": true|false, "source": text}')
        if not isinstance(entry["source"], str) or not entry["source"].strip():
            raise _fail(where, f"folds.{key}", "source must name a public document/URL or say 'estimate'")
        sources[f"folds.{key}"] = entry["source"]
        if entry["value"]:
            ops.update(FOLDS[key])
    return frozenset(ops), sources


def target_from_dict(raw: Any, where: str) -> Target:
    if not isinstance(raw, dict):
        raise HexfuseError(f"target {where}: expected a JSON object")
    known = {"name", "description", "factors", "folds", *_NUMERIC}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise _fail(where, unknown[0], "unknown field (typo?)")
    for text in ("name", "description"):
        if not isinstance(raw.get(text), str) or not raw[text].strip():
            raise _fail(where, text, "must be a non-empty string")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in _NUMERIC:
        if name not in raw and name in OPTIONAL:
            values[name], sources[name] = OPTIONAL[name]
            continue
        values[name], sources[name] = _figure(raw, name, where)
    factors, factor_sources = _factors(raw, where)
    sources.update(factor_sources)
    folds, fold_sources = _folds(raw, where)
    sources.update(fold_sources)
    if values["hmx_fp16_macs_per_cycle"] > values["hmx_int8_macs_per_cycle"]:
        raise _fail(where, "hmx_fp16_macs_per_cycle", "exceeds hmx_int8_macs_per_cycle (HMX fp16 is never faster)")
    if values["resident_mb"] > values["vtcm_mb"]:
        raise _fail(where, "resident_mb", "larger than vtcm_mb")
    if values["op_hvx_contexts"] > values["hvx_contexts"]:
        raise _fail(where, "op_hvx_contexts", "exceeds hvx_contexts")
    return Target(raw["name"], raw["description"], factors=factors, folds=folds, sources=sources, path=where, **values)


def target_to_dict(target: Target) -> dict[str, Any]:
    """The JSON form; round-trips through ``target_from_dict``."""
    out: dict[str, Any] = {"name": target.name, "description": target.description}
    for name in _NUMERIC:
        out[name] = {"value": getattr(target, name), "source": target.sources.get(name, "estimate")}
    folds = {key: {"value": all(op in target.folds for op in ops), "source": target.sources.get(f"folds.{key}", "estimate")}
             for key, ops in FOLDS.items() if f"folds.{key}" in target.sources or any(op in target.folds for op in ops)}
    if folds:
        out["folds"] = folds
    if target.factors:
        out["factors"] = {
            c: {"value": round(v, 6), "source": target.sources.get(f"factors.{c}", "estimate")}
            for c, v in sorted(target.factors.items())
        }
    return out


def list_targets() -> list[str]:
    return sorted(p.stem for p in TARGETS_DIR.glob("*.json"))


def _resolve(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    path = Path(text)
    if text.endswith(".json") or path.exists():
        return path
    name = ALIASES.get(text.lower(), text.lower())
    candidate = TARGETS_DIR / f"{name}.json"
    if not candidate.is_file():
        raise HexfuseError(f"unknown target {text!r} (known: {', '.join(list_targets())}; or give a .json path)")
    return candidate


def load_target(name_or_path: str | Path) -> Target:
    """A validated Target from a bundled name (``sm8550``, ``v75``, ``x-elite``...) or a JSON path."""
    path = _resolve(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise HexfuseError(f"target {path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise HexfuseError(f"target {path}: not a target JSON file (not UTF-8 text)") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HexfuseError(f"target {path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    return target_from_dict(raw, str(path))
