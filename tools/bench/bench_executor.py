#!/usr/bin/env python3
"""Host overlap benchmark of the hexfuse engine executor.

For balanced matrix + vector pairs (a GEMM on the MATRIX lane, an independent vector task on the
VECTOR lane) it measures in one run, as medians of several repetitions:

    T_matrix    the GEMM alone            T_serial      both, barrier switch on (serial=1)
    T_vector    the vector task alone     T_concurrent  both, overlapping on their lanes (serial=0)

    overlap efficiency = (T_serial - T_concurrent) / (T_serial - max(T_matrix, T_vector))

1.0 means the shorter task hid completely behind the longer one. Each lane is one std::thread, so on a
2-core host the two lanes get a core each; the residual is lane hand-off, wake-up latency and the two
tasks sharing caches / memory bandwidth.

    python tools/bench/bench_executor.py [--reps 15] [--gemm 256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hexfuse.graph_passes.spec.model import FusedOp, FusionSpec, NodeSpec, TaskSpec, TensorSpec
from hexfuse.op_package.build import build_host
from hexfuse.op_package.host import HostPackage
from hexfuse.op_package.render import render_package
from hexfuse.op_package.writer import write_tree

VECTOR_KINDS = {"sigmoid": "Sigmoid", "softmax": "Softmax"}
SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)  # vector sizes relative to the first guess; the closest balance wins


def _t(name: str, shape: tuple[int, ...]) -> TensorSpec:
    return TensorSpec(name, "float32", shape)


def _matrix_task(n: int) -> tuple[TaskSpec, list[TensorSpec], list[TensorSpec]]:
    task = TaskSpec("tm", "matrix", (NodeSpec("gemm", "MatMul", "", ("a", "b"), ("c",)),), ("a", "b"), ("c",))
    return task, [_t("a", (n, n)), _t("b", (n, n))], [_t("c", (n, n))]


def _vector_task(kind: str, rows: int) -> tuple[TaskSpec, list[TensorSpec], list[TensorSpec]]:
    node = NodeSpec("vec", VECTOR_KINDS[kind], "", ("x",), ("y",), {"axis": -1} if kind == "softmax" else {})
    task = TaskSpec("tv", "vector", (node,), ("x",), ("y",))
    return task, [_t("x", (rows, 1024))], [_t("y", (rows, 1024))]


def _op(name: str, parts: list[tuple[TaskSpec, list[TensorSpec], list[TensorSpec]]]) -> FusedOp:
    inputs = [t for _, ins, _ in parts for t in ins]
    outputs = [t for _, _, outs in parts for t in outs]
    return FusedOp(name, f"hexfuse/{name}", tuple(inputs), tuple(outputs), tuple(p[0] for p in parts),
                   tuple(inputs + outputs))


def build_spec(gemm: int, rows_by_kind: dict[str, list[int]]) -> FusionSpec:
    ops = [_op("Bench_matrix", [_matrix_task(gemm)])]
    for kind, rows_list in rows_by_kind.items():
        for rows in rows_list:
            ops.append(_op(f"Bench_{kind}_{rows}", [_vector_task(kind, rows)]))
            ops.append(_op(f"Bench_pair_{kind}_{rows}", [_matrix_task(gemm), _vector_task(kind, rows)]))
    return FusionSpec("bench.onnx", "0" * 64, "host", tuple(ops))


def median_seconds(pkg: HostPackage, op: str, inputs: list[np.ndarray], serial: bool, reps: int) -> float:
    pkg.run(op, inputs, serial=serial, trace=False)  # warm caches and lane threads
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        pkg.run(op, inputs, serial=serial, trace=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15, help="repetitions per measurement (median)")
    parser.add_argument("--gemm", type=int, default=256, help="GEMM size n (n x n x n)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    load = os.getloadavg()[0]
    if load > 0.5:  # the two lanes need the two cores: a busy neighbour turns overlap into time-slicing
        print(f"note: 1-min load average {load:.2f} before the run: another process shares the "
              f"{os.cpu_count()} cores, so overlap efficiency will read low", file=sys.stderr)
    # First guess of the balance (host scalar kernels): ~30 GEMM MACs per sigmoid, ~60 per softmax element.
    guess = {"sigmoid": args.gemm ** 3 // 30 // 1024, "softmax": args.gemm ** 3 // 60 // 1024}
    rows = {k: sorted({max(1, int(g * s)) for s in SCALES}) for k, g in guess.items()}
    spec = build_spec(args.gemm, rows)
    with tempfile.TemporaryDirectory(prefix="hexfuse-bench-") as tmp:
        pkg = HostPackage(build_host(write_tree(render_package(spec), Path(tmp) / "pkg")), spec)
        a, b = (rng.standard_normal((args.gemm, args.gemm)).astype(np.float32) for _ in range(2))
        t_matrix = median_seconds(pkg, "Bench_matrix", [a, b], False, args.reps)
        print(f"host executor overlap, GEMM {args.gemm}^3 on the MATRIX lane, {args.reps} reps (median), "
              f"lanes: 1 matrix + 1 vector thread")
        print(f"{'pair':<28}{'T_matrix':>10}{'T_vector':>10}{'T_serial':>10}{'T_concur':>10}{'overlap':>9}")
        for kind, rows_list in rows.items():
            vec = {r: rng.standard_normal((r, 1024)).astype(np.float32) for r in rows_list}
            t_vec = {r: median_seconds(pkg, f"Bench_{kind}_{r}", [vec[r]], False, args.reps) for r in rows_list}
            r = min(rows_list, key=lambda r: abs(np.log(t_vec[r] / t_matrix)))  # the balanced pair
            pair = f"Bench_pair_{kind}_{r}"
            t_serial = median_seconds(pkg, pair, [a, b, vec[r]], True, args.reps)
            t_conc = median_seconds(pkg, pair, [a, b, vec[r]], False, args.reps)
            eff = (t_serial - t_conc) / (t_serial - max(t_matrix, t_vec[r]))
            label = f"gemm{args.gemm} || {kind}[{r}x1024]"
            print(f"{label:<28}{t_matrix * 1e3:>8.2f}ms{t_vec[r] * 1e3:>8.2f}ms{t_serial * 1e3:>8.2f}ms"
                  f"{t_conc * 1e3:>8.2f}ms{eff:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
