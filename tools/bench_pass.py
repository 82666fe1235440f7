"""Benchmark: time of analyze + fuse against model size, beside ONNX Runtime's session creation.

    python tools/bench_pass.py [--layers 10 100 400 1600] [--hidden 16] [--no-ort]

Prints, per model size, the pass's stages (load, prepare, analyse, select, rewrite), its time per
node, and the time ONNX Runtime (CPU EP) takes to create a session on the same model, in one run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graph_passes.pipeline import fuse_model  # noqa: E402
from tools.synthetic import NODES_PER_LAYER, stacked_lm  # noqa: E402


def _ort_session_seconds(path: Path) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    start = time.perf_counter()
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[10, 100, 400, 1600])
    parser.add_argument("--hidden", type=int, default=16, help="hidden size of the synthetic layers")
    parser.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime session creation")
    args = parser.parse_args()
    header = f"{'nodes':>7} {'groups':>6} {'load':>6} {'prep':>6} {'analyse':>7} {'select':>6} {'rewrite':>7} {'pass s':>7} {'us/node':>7} {'ORT s':>7} {'ORT/pass':>8}"
    print(header)
    with tempfile.TemporaryDirectory() as scratch:
        for layers in args.layers:
            path = Path(scratch) / f"lm_{layers}.onnx"
            import onnx

            onnx.save(stacked_lm(layers, hidden=args.hidden), path)
            start = time.perf_counter()
            result = fuse_model(path)
            total = time.perf_counter() - start
            t = result.analyzed.timings
            nodes = layers * NODES_PER_LAYER
            ort_seconds = float("nan") if args.no_ort else _ort_session_seconds(path)
            print(
                f"{nodes:>7} {len(result.spec.fused_ops):>6} {t['load']:>6.2f} {t['prepare']:>6.2f} {t['analyse']:>7.2f} "
                f"{t['select']:>6.2f} {t.get('rewrite', 0.0):>7.2f} {total:>7.2f} {1e6 * total / nodes:>7.1f} "
                f"{ort_seconds:>7.2f} {ort_seconds / total:>8.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
