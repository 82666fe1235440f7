#!/usr/bin/env python3
"""Host speed of the quantized vector kernels against the float chain they replace.

For each kernel, one DQ -> op -> Q unit on the same codes is planned twice in one host package:

    fused    the QDQ fusion's quantized kernel (qvector.h) on the codes
    chain    the same unit with its encodings hidden from the generator, so every node stays a float
             kernel: dequantize into a float buffer, the float op, quantize back

and both run in the executor's internal-serial mode with one lane per resource. Times are the sums of
the units' micro-ops from the executor trace (no Python or lane hand-off in them), median of --reps
runs; the ratio is chain / fused. These are scalar
x86 timings of the reference paths: they show what the integer formulation saves before any vector
unit. The HVX paths cannot be timed here: qemu-hexagon interprets every instruction, so its timings
say nothing about a Hexagon core.

    python tools/bench/bench_qvector.py [--reps 9] [--elements 1048576]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hexfuse.graph_passes.spec.model import FusedOp, FusionSpec, NodeSpec, QuantSpec, TaskSpec, TensorSpec
from hexfuse.op_package.build import build_host
from hexfuse.op_package.host import HostPackage
from hexfuse.op_package.lower.qdq_fusion import find_qdq_units
from hexfuse.op_package.render import render_package
from hexfuse.op_package.writer import write_tree

ROW = 256  # row length of the row kernels (mean, softmax)


@dataclass(frozen=True)
class Unit:
    name: str
    op_type: str
    shapes: tuple[tuple[int, ...], ...]  # data inputs
    out_shape: tuple[int, ...]
    attrs: dict
    extra: tuple[tuple[str, tuple[int, ...], str], ...] = ()  # (name, shape, dtype) static int inputs
    zero: int = 100  # input zero point (0 keeps Sqrt's inputs non-negative)


def units(n: int) -> list[Unit]:
    rows = n // ROW
    return [
        Unit("lookup (Sigmoid)", "Sigmoid", ((rows, ROW),), (rows, ROW), {}),
        Unit("lookup (Sqrt)", "Sqrt", ((rows, ROW),), (rows, ROW), {}, zero=0),
        Unit("binary Add", "Add", ((rows, ROW), (rows, ROW)), (rows, ROW), {}),
        Unit("binary Mul, row broadcast", "Mul", ((rows, ROW), (ROW,)), (rows, ROW), {}),
        Unit("row mean", "ReduceMean", ((rows, ROW),), (rows, 1), {"keepdims": 1}, (("axes", (1,), "int64"),)),
        Unit("softmax", "Softmax", ((rows, ROW),), (rows, ROW), {"axis": -1}),
        Unit("move + requantize (Transpose)", "Transpose", ((rows, ROW),), (ROW, rows), {"perm": (1, 0)}),
    ]


def _quant(i: int, zero: int = 100) -> QuantSpec:
    return QuantSpec("uint8", (float(np.float32(0.02 + 0.005 * i)),), (zero + 3 * i,))


def fused_op(index: int, unit: Unit, with_encodings: bool) -> FusedOp:
    """DQ per data input, the op, one Q; encodings on the code tensors unless hidden (the float chain)."""
    tensors: list[TensorSpec] = []
    nodes: list[NodeSpec] = []
    op_inputs: list[str] = []
    for i, shape in enumerate(unit.shapes):
        q = _quant(i, unit.zero)
        tensors += [TensorSpec(f"x{i}", "uint8", shape, quant=q if with_encodings else None),
                    TensorSpec(f"x{i}.s", "float32", (), True), TensorSpec(f"x{i}.z", "uint8", (), True),
                    TensorSpec(f"x{i}f", "float32", shape)]
        nodes.append(NodeSpec(f"dq{i}", "DequantizeLinear", "", (f"x{i}", f"x{i}.s", f"x{i}.z"), (f"x{i}f",)))
        op_inputs.append(f"x{i}f")
    for name, shape, dtype in unit.extra:
        tensors.append(TensorSpec(name, dtype, shape, True))
        op_inputs.append(name)
    out_q = QuantSpec("uint8", (1 / 256,), (0,)) if unit.op_type in ("Sigmoid", "Softmax") else _quant(5)
    tensors += [TensorSpec("yf", "float32", unit.out_shape), TensorSpec("y.s", "float32", (), True),
                TensorSpec("y.z", "uint8", (), True),
                TensorSpec("y", "uint8", unit.out_shape, quant=out_q if with_encodings else None)]
    nodes += [NodeSpec("op", unit.op_type, "", tuple(op_inputs), ("yf",), dict(unit.attrs)),
              NodeSpec("q", "QuantizeLinear", "", ("yf", "y.s", "y.z"), ("y",))]
    by_name = {t.name: t for t in tensors}
    inputs = [t for t in tensors if t.static or (t.dtype == "uint8" and t.name.startswith("x") and "." not in t.name)]
    name = f"HexFuse_b{index}{'q' if with_encodings else 'f'}"
    task = TaskSpec("t0", "vector", tuple(nodes), tuple(t.name for t in inputs), ("y",))
    return FusedOp(name, name, tuple(inputs), (by_name["y"],), (task,), tuple(tensors))


def feeds(op: FusedOp, rng: np.random.Generator) -> list[np.ndarray]:
    """Codes and the encodings as the static inputs the float chain's DQ kernels read at run time."""
    quant = {t.name: t.quant for t in op.tensors if t.quant is not None}
    values = []
    for t in op.inputs:
        if t.name.endswith((".s", ".z")):
            q = quant[t.name[:-2]]
            values.append(np.array(q.scale[0], np.float32) if t.name.endswith(".s")
                          else np.array(q.zero_point[0], np.uint8))
        elif t.name == "axes":
            values.append(np.array([1], np.int64))
        else:
            values.append(rng.integers(0, 256, t.shape).astype(np.uint8))
    return values


def kernel_ns(package: HostPackage, op: FusedOp, values: list[np.ndarray], reps: int) -> float:
    times = []
    for _ in range(reps):
        _, trace = package.run(op.op_type, values, serial=True, trace=True)
        assert trace is not None
        times.append(sum(e.end_ns - e.start_ns for e in trace.micro_ops()))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--elements", type=int, default=1 << 20, help="elements per tensor (a multiple of 256)")
    args = parser.parse_args(argv)
    todo = units(max(ROW, args.elements // ROW * ROW))
    ops = [fused_op(i, u, flag) for i, u in enumerate(todo) for flag in (True, False)]
    for fused, chain in zip(ops[::2], ops[1::2]):  # the comparison is only fair if the pass did (not) fire
        assert find_qdq_units(fused) and not find_qdq_units(chain), fused.op_type
    spec = FusionSpec("bench_qvector.onnx", "0" * 64, "sm8650", tuple(ops))
    with tempfile.TemporaryDirectory() as tmp:
        package = HostPackage(build_host(write_tree(render_package(spec), Path(tmp) / "pkg")), spec)
        package.configure(1, 1, 1)
        rng = np.random.default_rng(0)
        print(f"{args.elements} elements per tensor, median of {args.reps}; kernel time from the trace, x86 scalar")
        print(f"{'kernel':<32} {'fused ms':>9} {'chain ms':>9} {'chain/fused':>12}")
        for unit, fused, chain in zip(todo, ops[::2], ops[1::2]):
            values = feeds(fused, rng)  # the chain reads the same encodings from these inputs
            t_fused = kernel_ns(package, fused, values, args.reps)
            t_chain = kernel_ns(package, chain, values, args.reps)
            print(f"{unit.name:<32} {t_fused / 1e6:>9.3f} {t_chain / 1e6:>9.3f} {t_chain / t_fused:>11.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
