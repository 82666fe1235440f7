"""Benchmark: what users run (``hexfuse fuse`` with and without verification) and the pass alone,
beside ONNX Runtime session creation on the same model, CPU time and wall, in one run.

    python tools/bench/bench_pass.py [--layers 100 400 1600 3300] [--hidden 16] [--repeat 1] [--models A.onnx ...]

Per size (stacked LM layers from tools/synthetic.py, 31 nodes each, weights of a few KB) and per model
file given (``--models``: e.g. real-size decoder layers from tools/realsize.py, whose weights are most
of their bytes), back to back, each in a fresh process so that no measurement warms another's caches:

    ORT basic / all   InferenceSession creation on the CPU EP at ORT_ENABLE_BASIC / ORT_ENABLE_ALL
                      (timed inside the process, after ``import onnxruntime``)
    pass              hexfuse.fuse_model: load -> rewrite, in memory (timed inside, after the imports
                      of every module it uses)
    floor             what any pass reading the model this way pays, timed like the pass: the file read,
                      hashed (the spec and the engine maps name a model by its sha256) and parsed, onnx's
                      checker and shape inference as the load runs them (C++; the weights' data left
                      out of inference where they are most of the bytes), and one walk reading each
                      node's op type, domain, name, inputs and outputs and each inferred tensor's name
                      and type, doing nothing else (protobuf field access)
    fuse --no-verify  the whole ``hexfuse fuse`` command, startup and imports included
    fuse              the same with the default verification (graph_passes/rewrite/verify.py)

Every run prices fused nodes as designed (``--as-designed``), so that the synthetic LM's groups are
fused and the stages after selection work on them: priced as the package builds a fused node, the
defaults fuse none of them and the rewrite would have nothing to do.

CPU seconds are the process's user + system time (all threads), wall seconds its elapsed time; with
``--repeat N`` every figure is the median of N runs. Ratios are against ORT basic: the goals are
pass <= 0.25 and fuse <= 2. The floor's ratio is how far below the pass's any code reading the protobuf from
Python could go: the C++ parts plus the field access alone.

Below the table, per size: the pass's stages (CPU s, its last run) and, of the load, the CPU of onnx's
checker and shape inference (C++: the part no code of the pass can shorten).

The commands run as on a user's machine: Python caches compiled bytecode (a pip install compiles it
at install time). A ``PYTHONDONTWRITEBYTECODE`` in the environment would make every ``hexfuse fuse``
compile the project again (0.1 s here), so the children run without it, after one warm-up command.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ("ORT basic", "ORT all", "pass", "floor", "fuse --no-verify", "fuse")


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _inside(kind: str, path: str) -> None:
    """Run one timed measurement in this process and print {cpu, wall, ...} as JSON."""
    if kind == "pass":
        # Every module the pass uses is imported before the clock, as onnxruntime is: fuse_model and the
        # default scorer import them on first use (so that ``hexfuse --help`` loads neither onnx nor numpy).
        import hexfuse.graph_passes.cost.scorer  # noqa: F401  (scorer_for imports it on first use)
        import hexfuse.graph_passes.pipeline as pipeline
        import hexfuse.op_package.htp_expand  # noqa: F401
        import hexfuse.op_package.hvx_coverage  # noqa: F401
        from hexfuse import fuse_model
        from hexfuse.graph_passes.cost.cli import scorer_for

        cpu, wall = time.process_time(), time.perf_counter()
        result = fuse_model(path, scorer_for(pipeline.DEFAULT_TARGET, pipeline.DEFAULT_MIN_GAIN, as_designed=True))
        extra = {"groups": len(result.analyzed.fused_nodes), "ops": len(result.spec.fused_ops),
                 "stages": {k: round(v, 3) for k, v in result.analyzed.timings.items()},
                 "onnx": round(result.analyzed.loaded.onnx_seconds, 3)}
    elif kind == "floor":
        import hashlib

        import onnx

        from hexfuse.graph_passes.load.model import strict_inference
        from hexfuse.graph_passes.load.weights import lighten

        cpu, wall = time.process_time(), time.perf_counter()
        raw = Path(path).read_bytes()
        hashlib.sha256(raw).hexdigest()
        model = onnx.load_from_string(raw)
        onnx.checker.check_model(raw)
        light = lighten(model, len(raw), strict_inference)
        inferred = light[0] if light is not None else strict_inference(raw)
        nodes = [(n.op_type, n.domain, n.name, tuple(n.input), tuple(n.output)) for n in model.graph.node]
        types = [(v.name, v.type.SerializeToString()) for v in inferred.graph.value_info]
        extra = {"nodes": len(nodes), "types": len(types)}
    else:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[kind]
        cpu, wall = time.process_time(), time.perf_counter()
        ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        extra = {}
    print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall, **extra}), flush=True)


def _user_env() -> dict[str, str]:
    """The environment of a user's shell: bytecode caching on (module docstring)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _measure_inside(kind: str, path: Path) -> dict:
    done = subprocess.run([sys.executable, __file__, "--inside", kind, str(path)], capture_output=True, text=True,
                          cwd=ROOT, env=_user_env())
    if done.returncode != 0:
        raise RuntimeError(f"{kind} failed: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure_command(path: Path, out: Path, verify: bool) -> dict:
    command = [sys.executable, "-m", "hexfuse", "fuse", str(path), "-o", str(out), "--as-designed"]
    command += [] if verify else ["--no-verify"]
    cpu, wall = _child_cpu(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=_user_env())
    if done.returncode != 0:
        raise RuntimeError(f"hexfuse fuse failed: {done.stderr.strip().splitlines()[-1]}")
    return {"cpu": _child_cpu() - cpu, "wall": time.perf_counter() - wall}


def _warm_up(hidden: int) -> None:
    """One small run of everything measured: every module those runs import gets its bytecode cached."""
    import onnx

    from hexfuse.tools.synthetic import stacked_lm

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "warm_up.onnx"
        onnx.save(stacked_lm(2, hidden=hidden), path)
        for kind in ("basic", "pass", "floor"):
            _measure_inside(kind, path)
        _measure_command(path, Path(scratch) / "out.onnx", verify=True)


def _one_size(layers: int, hidden: int, repeat: int) -> dict:
    import onnx

    from hexfuse.tools.synthetic import NODES_PER_LAYER, stacked_lm

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / f"lm_{layers}.onnx"
        onnx.save(stacked_lm(layers, hidden=hidden), path)
        return {"nodes": layers * NODES_PER_LAYER, **_one_model(path, repeat)}


def _one_file(path: Path, repeat: int) -> dict:
    import onnx

    nodes = len(onnx.load(path, load_external_data=False).graph.node)
    return {"nodes": nodes, **_one_model(path, repeat)}


def _one_model(path: Path, repeat: int) -> dict:
    """Every column on one model file (module docstring), each the median of ``repeat`` runs."""
    runs: dict[str, list[dict]] = {name: [] for name in COLUMNS}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(repeat):
            runs["ORT basic"].append(_measure_inside("basic", path))
            runs["ORT all"].append(_measure_inside("all", path))
            runs["pass"].append(_measure_inside("pass", path))
            runs["floor"].append(_measure_inside("floor", path))
            runs["fuse --no-verify"].append(_measure_command(path, Path(scratch) / "nv.onnx", verify=False))
            runs["fuse"].append(_measure_command(path, Path(scratch) / "v.onnx", verify=True))
    median = {name: {k: statistics.median(r[k] for r in rs) for k in ("cpu", "wall")} for name, rs in runs.items()}
    last = runs["pass"][-1]
    return {"groups": last["groups"], "ops": last["ops"], "stages": last["stages"], "onnx": last["onnx"], **median}


def _row(m: dict) -> str:
    basic = m["ORT basic"]["cpu"]
    cells = " ".join(f"{m[name]['cpu']:>6.2f}/{m[name]['wall']:<6.2f}" for name in COLUMNS)
    return (f"{m['nodes']:>7} {m['groups']:>6} {m['ops']:>3} {cells} {m['pass']['cpu'] / basic:>9.2f} "
            f"{m['floor']['cpu'] / basic:>9.2f} "
            f"{m['fuse --no-verify']['cpu'] / basic:>9.2f} {m['fuse']['cpu'] / basic:>9.2f} "
            f"{m['fuse']['wall'] / m['ORT basic']['wall']:>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[100, 400, 1600, 3300],
                        help="sizes in stacked LM layers (31 nodes each; default ~3k, 12k, 50k, 100k nodes)")
    parser.add_argument("--hidden", type=int, default=16, help="hidden size of the synthetic layers")
    parser.add_argument("--repeat", type=int, default=1, help="runs per figure (median)")
    parser.add_argument("--models", type=Path, nargs="+", default=[], metavar="MODEL",
                        help="also these model files (e.g. real-size layers: python -m hexfuse.tools.realsize)")
    parser.add_argument("--inside", nargs=2, metavar=("KIND", "MODEL"), help=argparse.SUPPRESS)  # internal
    args = parser.parse_args()
    if args.inside:
        _inside(*args.inside)
        return
    print("CPU/wall seconds per column; ratios against ORT basic (CPU, and wall for fuse)", flush=True)
    heads = " ".join(f"{name:>13}" for name in COLUMNS)
    print(f"{'nodes':>7} {'groups':>6} {'ops':>3} {heads} {'pass/ORT':>9} {'floor/ORT':>9} {'nv/ORT':>9} {'fuse/ORT':>9} "
          f"{'fuse/ORT w':>9}", flush=True)
    _warm_up(args.hidden)
    stages = []
    sized = [(f"{layers} layers", lambda layers=layers: _one_size(layers, args.hidden, args.repeat)) for layers in args.layers]
    files = [(f"{path.name} ({path.stat().st_size / 2**20:.0f} MB)", lambda path=path: _one_file(path, args.repeat))
             for path in args.models]
    for label, measure in sized + files:
        measured = measure()
        print(_row(measured), flush=True)
        stages.append(f"{label}: " + ", ".join(f"{k} {v:.2f}" for k, v in measured["stages"].items())
                      + f"; of load, onnx's checker and shape inference {measured['onnx']:.2f}")
    print("pass stages (CPU s, the last run):", *stages, sep="\n  ")


if __name__ == "__main__":
    main()
