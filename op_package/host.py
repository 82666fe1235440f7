"""Load a host-built op package with ctypes and run its fused ops on numpy arrays.

    pkg = HostPackage(build_host(dir), spec)
    outputs, trace = pkg.run("HexFuse_0_5162fd", [x, w, b], serial=False)
    trace.events  # per micro-op: lane, resource, task, node, tile, start_ns, end_ns
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import FusedOp, FusionSpec, QuantSpec, TensorSpec
from hexfuse.op_package.htp_expand import expand_fused_op
from hexfuse.op_package.plan import OpPlan

RESOURCES = ("matrix", "vector", "dma")


class _Event(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("op", ctypes.c_int32), ("task", ctypes.c_int32),
                ("node", ctypes.c_int32), ("tile", ctypes.c_int32), ("resource", ctypes.c_int32),
                ("lane", ctypes.c_int32), ("pad", ctypes.c_int32), ("start_ns", ctypes.c_int64),
                ("end_ns", ctypes.c_int64)]


class _Trace(ctypes.Structure):
    _fields_ = [("events", ctypes.POINTER(_Event)), ("capacity", ctypes.c_int32), ("count", ctypes.c_int32)]


assert ctypes.sizeof(_Event) == 48  # mirrors the static_assert in trace.h


@dataclass(frozen=True)
class Event:
    kind: str  # "micro_op" | "scratch" (a task's scratch lifetime)
    task: int
    node: int
    tile: int
    resource: str
    lane: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class Trace:
    events: tuple[Event, ...]

    def micro_ops(self) -> list[Event]:
        return [e for e in self.events if e.kind == "micro_op"]

    def span_ns(self) -> int:
        ops = self.micro_ops()
        return max(e.end_ns for e in ops) - min(e.start_ns for e in ops) if ops else 0


class _Wire(ctypes.Structure):  # mirrors hexfuse::Wire (port.h)
    _fields_ = [("data", ctypes.c_void_p), ("type", ctypes.c_int32), ("quantized", ctypes.c_int32),
                ("scale", ctypes.c_float), ("offset", ctypes.c_int32), ("count", ctypes.c_int64)]


# hexfuse::WireType values (port.h), by numpy dtype name
WIRE_TYPES = {"float32": 0, "uint8": 1, "int8": 2, "uint16": 3, "int16": 4, "int32": 5, "int64": 6, "bool": 7,
              "float16": 8}


def quantize(values: np.ndarray, quant: QuantSpec) -> np.ndarray:
    """ONNX QuantizeLinear (per-tensor): saturate(round_half_even(x / scale) + zero_point)."""
    info = np.iinfo(np.dtype(quant.dtype))
    q = np.rint(values.astype(np.float64) / quant.scale[0]) + quant.zero_point[0]
    return np.clip(q, info.min, info.max).astype(quant.dtype)


def wire_form(tensor: TensorSpec, values: np.ndarray) -> tuple[np.ndarray, bool, float, int]:
    """What the QNN EP hands the op for a port: (array, quantized, scale, offset) — the boundary DQ/Q
    folded into the port, int64 narrowed to int32 (DESIGN.md section 4)."""
    if tensor.wire is not None:
        if len(tensor.wire.scale) != 1:
            raise HexfuseError(f"port {tensor.name!r}: per-axis wire quantization is not supported")
        return quantize(values, tensor.wire), True, tensor.wire.scale[0], tensor.wire.zero_point[0]
    if tensor.dtype == "int64":
        return values.astype(np.int32), False, 1.0, 0
    return values, False, 1.0, 0


def _through_wire(tensor: TensorSpec, values: np.ndarray) -> np.ndarray:
    """The float values a wire-encoded port carries: its codes dequantized (what a DQ op hands on)."""
    if tensor.wire is None:
        return values
    codes = wire_form(tensor, values)[0].astype(np.float32)
    return (codes - np.float32(tensor.wire.zero_point[0])) * np.float32(tensor.wire.scale[0])


class HostPackage:
    def __init__(self, library: str | Path, spec: FusionSpec):
        self._lib = ctypes.CDLL(str(library))
        self._lib.hexfuse_op_type.restype = ctypes.c_char_p
        self._lib.hexfuse_run.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                          ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.POINTER(_Trace)]
        self._lib.hexfuse_configure.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_longlong]
        self._lib.hexfuse_run_wire.argtypes = [ctypes.c_int, ctypes.POINTER(_Wire), ctypes.POINTER(_Wire)]
        self.op_types = [self._lib.hexfuse_op_type(i).decode() for i in range(self._lib.hexfuse_num_ops())]
        # The library holds every fused op, then the task ops of their HTP expansion (htp_expand.py).
        self._ops: dict[str, FusedOp | OpPlan] = {op.op_type: op for op in spec.fused_ops}
        # Ports as the QNN EP describes them (float with a wire encoding): task-op plans read codes.
        self._wire_ports: dict[str, tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]] = {
            op.op_type: (op.inputs, op.outputs) for op in spec.fused_ops}
        for op in spec.fused_ops:
            for task_op in expand_fused_op(op).task_ops:
                self._ops[task_op.symbol] = task_op.plan
                self._wire_ports[task_op.symbol] = (tuple(op.inputs[i] for i in task_op.inputs),
                                                    tuple(op.outputs[j] for j in task_op.outputs))
        if self.op_types != list(self._ops):
            raise HexfuseError(f"{library} was not built from this spec (op types differ)")

    def configure(self, matrix: int = 1, vector: int = 1, dma: int = 1, scratch_budget: int = 0) -> None:
        """Lane quotas and the scratch budget (0 = unlimited); restarts the lane threads."""
        if self._lib.hexfuse_configure(matrix, vector, dma, scratch_budget) != 0:
            raise HexfuseError("invalid lane configuration")

    def info(self, op_type: str) -> dict[str, int]:
        vals = [ctypes.c_int() for _ in range(4)]
        self._lib.hexfuse_op_info(self.op_types.index(op_type), *[ctypes.byref(v) for v in vals])
        return dict(zip(("inputs", "outputs", "micro_ops", "tasks"), (v.value for v in vals)))

    def spec_of(self, op_type: str) -> FusedOp:
        return self._ops[op_type]

    def run(self, op_type: str, inputs: Sequence[np.ndarray], serial: bool = False,
            trace: bool = True) -> tuple[list[np.ndarray], Trace | None]:
        op = self._ops[op_type]
        if len(inputs) != len(op.inputs):
            raise HexfuseError(f"{op_type} takes {len(op.inputs)} inputs, got {len(inputs)}")
        arrays = []
        for spec, arr in zip(op.inputs, inputs):
            arr = np.require(arr, requirements="C")  # (ascontiguousarray would turn 0-d into 1-d)
            if arr.dtype != np.dtype(spec.dtype) or tuple(arr.shape) != tuple(spec.shape):
                raise HexfuseError(f"{op_type} input {spec.name!r}: expected {spec.dtype}{list(spec.shape)}, "
                                   f"got {arr.dtype}{list(arr.shape)}")
            arrays.append(arr)
        outputs = [np.empty(t.shape, dtype=t.dtype) for t in op.outputs]
        in_ptrs = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
        out_ptrs = (ctypes.c_void_p * max(1, len(outputs)))(*[o.ctypes.data for o in outputs])
        info = self.info(op_type)
        capacity = info["micro_ops"] + info["tasks"]
        events = (_Event * capacity)()
        raw = _Trace(events, capacity, 0)
        status = self._lib.hexfuse_run(self.op_types.index(op_type), in_ptrs, out_ptrs, int(serial),
                                       ctypes.byref(raw) if trace else None)
        if status != 0:
            raise HexfuseError(f"{op_type}: host run failed with status {status}")
        if not trace:
            return outputs, None
        kinds = ("micro_op", "scratch")
        return outputs, Trace(tuple(Event(kinds[e.kind], e.task, e.node, e.tile, RESOURCES[e.resource], e.lane,
                                          e.start_ns, e.end_ns) for e in events[:raw.count]))

    def run_wire(self, op_type: str, inputs: Sequence[np.ndarray], plain_float: bool = False) -> list[np.ndarray]:
        """Run the op the way the QNN EP drives it: every port in its wire form (``wire_form``), micro-ops
        in plan order on one thread (port.h). Returns the outputs in their wire form (e.g. uint8).
        ``plain_float``: wire-encoded ports as plain float32 instead (their DQ / Q run as ops of their own)."""
        ports_in, ports_out = self._wire_ports[op_type]
        if plain_float:
            ports_in, ports_out = ([replace(t, wire=None) for t in ports] for ports in (ports_in, ports_out))
            inputs = [_through_wire(t, np.asarray(v)) for t, v in zip(self._wire_ports[op_type][0], inputs)]
        keep, wires = [], []
        for tensor, values in zip(ports_in, inputs):
            array, quantized, scale, offset = wire_form(tensor, np.require(values, requirements="C"))
            array = np.require(array, requirements="C")
            keep.append(array)
            wires.append(_Wire(array.ctypes.data, WIRE_TYPES[array.dtype.name], int(quantized), scale, offset, array.size))
        outs, out_wires = [], []
        for tensor in ports_out:
            dtype = tensor.wire.dtype if tensor.wire is not None else ("int32" if tensor.dtype == "int64" else tensor.dtype)
            array = np.empty(tensor.shape, dtype=dtype)
            quant = tensor.wire
            outs.append(array)
            out_wires.append(_Wire(array.ctypes.data, WIRE_TYPES[dtype], int(quant is not None),
                                   quant.scale[0] if quant else 1.0, quant.zero_point[0] if quant else 0, array.size))
        in_arr = (_Wire * max(1, len(wires)))(*wires)
        out_arr = (_Wire * max(1, len(out_wires)))(*out_wires)
        status = self._lib.hexfuse_run_wire(self.op_types.index(op_type), in_arr, out_arr)
        if status != 0:
            raise HexfuseError(f"{op_type}: wire run failed with status {status}")
        return outs
