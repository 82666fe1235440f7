"""Benchmark: time and peak memory of analyze + fuse against model size, beside ONNX Runtime.

    python tools/bench_pass.py [--layers 10 100 400 1600 3300] [--hidden 16] [--no-ort]

Each size runs in its own process so that its peak memory (max RSS) is its own. Per row: the pass's
stages (load, prepare, analyse, select, rewrite), total seconds, microseconds per node, peak MB,
and the seconds ONNX Runtime (CPU EP) takes to create a session on the same model, in that process.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HEADER = (f"{'nodes':>7} {'groups':>6} {'load':>6} {'prep':>6} {'analyse':>7} {'select':>6} {'rewrite':>7} "
          f"{'pass s':>7} {'us/node':>7} {'peak MB':>7} {'ORT s':>7} {'ORT/pass':>8}")


def _ort_session_seconds(path: Path) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    start = time.perf_counter()
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return time.perf_counter() - start


def _one(layers: int, hidden: int, with_ort: bool) -> str:
    import onnx

    from hexfuse import fuse_model
    from hexfuse.tools.synthetic import NODES_PER_LAYER, stacked_lm

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / f"lm_{layers}.onnx"
        onnx.save(stacked_lm(layers, hidden=hidden), path)
        start = time.perf_counter()
        result = fuse_model(path)
        total = time.perf_counter() - start
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before ORT adds its own
        ort_seconds = _ort_session_seconds(path) if with_ort else float("nan")
    t = result.analyzed.timings
    nodes = layers * NODES_PER_LAYER
    return (f"{nodes:>7} {len(result.spec.fused_ops):>6} {t['load']:>6.2f} {t['prepare']:>6.2f} {t['analyse']:>7.2f} "
            f"{t['select']:>6.2f} {t.get('rewrite', 0.0):>7.2f} {total:>7.2f} {1e6 * total / nodes:>7.1f} "
            f"{peak_mb:>7.0f} {ort_seconds:>7.2f} {ort_seconds / total:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[10, 100, 400, 1600, 3300])
    parser.add_argument("--hidden", type=int, default=16, help="hidden size of the synthetic layers")
    parser.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime session creation")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: one size, this process
    args = parser.parse_args()
    if args.one is not None:
        print(_one(args.one, args.hidden, not args.no_ort), flush=True)
        return
    print(HEADER, flush=True)
    for layers in args.layers:
        command = [sys.executable, __file__, "--one", str(layers), "--hidden", str(args.hidden)]
        done = subprocess.run(command + (["--no-ort"] if args.no_ort else []), capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{layers} layers failed: {done.stderr.strip().splitlines()[-1]}", flush=True)
            continue
        print(done.stdout.rstrip(), flush=True)


if __name__ == "__main__":
    main()
