"""Load a host-built op package with ctypes and run its fused ops on numpy arrays.

    pkg = HostPackage(build_host(dir), spec)
    outputs, trace = pkg.run("HexFuse_0_5162fd", [x, w, b], serial=False)
    trace.events  # per micro-op: lane, resource, task, node, tile, start_ns, end_ns
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec import FusedOp, FusionSpec

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


class HostPackage:
    def __init__(self, library: str | Path, spec: FusionSpec):
        self._lib = ctypes.CDLL(str(library))
        self._lib.hexfuse_op_type.restype = ctypes.c_char_p
        self._lib.hexfuse_run.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                          ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.POINTER(_Trace)]
        self._lib.hexfuse_configure.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_longlong]
        self.op_types = [self._lib.hexfuse_op_type(i).decode() for i in range(self._lib.hexfuse_num_ops())]
        self._ops = {op.op_type: op for op in spec.fused_ops}
        if self.op_types != [op.op_type for op in spec.fused_ops]:
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
