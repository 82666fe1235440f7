#!/usr/bin/env python3
"""What a fused model costs where the op package is absent: fused / original latency on stock ORT CPU.

Without the package ONNX Runtime inlines every fused function, so the fused model should run exactly
as fast as the original; anything else (initializers turned into overridable inputs, lost constant
folding or layout passes) shows up here. For every positive bundled model (``models/*.onnx`` that the
pass fuses) and the light Model Zoo positives, it fuses the model, then times original and fused
sessions interleaved (A B B A ..., so drift hits both alike) in one process and prints per model:

    nodes after ORT optimization (original / fused), median latency of each, the fused/original ratio
    of medians with a paired bootstrap 95% CI, and the spread (p10-p90 of per-pair ratios).

Goal: every ratio within 2% (1.00 +- 0.02).

    python tools/bench/bench_ort_overhead.py [--iters 200] [--threads 1] [--models googlenet,light_resnet50]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from hexfuse import fuse_model
from hexfuse.graph_passes.load.io import write_atomic
from hexfuse.tools.ab.inputs import random_inputs
from hexfuse.tools.ab.latency import paired_speedup
from hexfuse.tools.ab.models import graph_inputs

ROOT = Path(__file__).resolve().parents[2]
LIGHT = Path(onnx.__file__).parent / "backend/test/data/light"
LIGHT_POSITIVES = ("inception_v1", "inception_v2", "squeezenet", "shufflenet", "resnet50")
GOAL = 0.02


def candidates() -> list[Path]:
    bundled = sorted(p for p in (ROOT / "models").glob("*.onnx"))
    return bundled + [LIGHT / f"light_{name}.onnx" for name in LIGHT_POSITIVES]


def session(path: Path, threads: int, optimized: Path | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if optimized is not None:
        so.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def optimized_nodes(path: Path, threads: int, work: Path) -> int:
    out = work / f"{path.stem}.optimized.onnx"
    session(path, threads, out)
    return len(onnx.load(str(out), load_external_data=False).graph.node)


def time_pair(a: ort.InferenceSession, b: ort.InferenceSession, feeds: dict, iters: int,
              warmup: int) -> tuple[np.ndarray, np.ndarray]:
    for _ in range(warmup):
        a.run(None, feeds)
        b.run(None, feeds)
    ta, tb = np.empty(iters), np.empty(iters)
    for i in range(iters):
        order = ((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta))
        for sess, times in order:
            start = time.perf_counter()
            sess.run(None, feeds)
            times[i] = (time.perf_counter() - start) * 1e3
    return ta, tb


def bench_one(path: Path, work: Path, iters: int, threads: int, seed: int) -> dict | None:
    result = fuse_model(path)
    if not result.changed:
        return None  # negative control: nothing fused, nothing to compare
    fused = work / f"{path.stem}.fused.onnx"
    write_atomic(fused, result.model_bytes)
    feeds = random_inputs(graph_inputs(onnx.load(str(path), load_external_data=False)), seed)
    orig_s, fused_s = session(path, threads), session(fused, threads)
    t_orig, t_fused = time_pair(orig_s, fused_s, feeds, iters, warmup=max(3, iters // 20))
    sp = paired_speedup(t_fused, t_orig, seed)  # fused time / original time = ratio of medians
    lo, hi = np.percentile(t_fused / t_orig, [10, 90])
    return {"model": path.stem, "fused_nodes": len(result.spec.fused_ops),
            "opt_nodes": (optimized_nodes(path, threads, work), optimized_nodes(fused, threads, work)),
            "orig_ms": float(np.median(t_orig)), "fused_ms": float(np.median(t_fused)),
            "ratio": sp["speedup"], "ci": sp["ci95"], "spread": (float(lo), float(hi))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200, help="timed pairs per model (default 200)")
    parser.add_argument("--threads", type=int, default=1, help="ORT intra-op threads (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="inputs and bootstrap seed (default 0)")
    parser.add_argument("--models", help="comma-separated model stems to run (default: all positives)")
    args = parser.parse_args(argv)
    paths = candidates()
    if args.models:
        wanted = set(args.models.split(","))
        paths = [p for p in paths if p.stem in wanted]
    print(f"onnxruntime {ort.__version__}, CPU EP, {args.threads} intra-op thread(s), {args.iters} interleaved pairs")
    print(f"{'model':<28} {'fused':>5} {'opt nodes':>11} {'orig ms':>9} {'fused ms':>9} {'fused/orig':>10} "
          f"{'95% CI':>15} {'p10-p90 pairs':>15}  goal")
    misses = 0
    with tempfile.TemporaryDirectory(prefix="hexfuse_bench_") as tmp:
        for path in paths:
            row = bench_one(path, Path(tmp), args.iters, args.threads, args.seed)
            if row is None:
                print(f"{path.stem:<28} nothing fused (negative control): skipped")
                continue
            ok = abs(row["ratio"] - 1.0) <= GOAL
            misses += not ok
            print(f"{row['model']:<28} {row['fused_nodes']:>5} {row['opt_nodes'][0]:>5}/{row['opt_nodes'][1]:<5} "
                  f"{row['orig_ms']:>9.3f} {row['fused_ms']:>9.3f} {row['ratio']:>10.3f} "
                  f"{row['ci'][0]:>7.3f}-{row['ci'][1]:<7.3f} {row['spread'][0]:>7.3f}-{row['spread'][1]:<7.3f}  "
                  f"{'ok' if ok else 'MISS'}", flush=True)
    print(f"{misses} model(s) outside {GOAL:.0%}" if misses else f"every model within {GOAL:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
