"""`hexfuse ab ORIGINAL.onnx FUSED.onnx ...`: argparse wiring; the work is in runner.py."""
from __future__ import annotations

import argparse
import sys

from hexfuse.graph_passes.errors import HexfuseError

from .runner import AbOptions, run_ab


def register(subparsers) -> None:
    p = subparsers.add_parser("ab", help="A/B original vs fused model: baselines, equivalence, latency, profiles",
                              description="Run ORIGINAL and FUSED on the same inputs and report whether fusion pays.")
    p.add_argument("original", metavar="ORIGINAL.onnx")
    p.add_argument("fused", metavar="FUSED.onnx")
    p.add_argument("--ep", choices=("cpu", "qnn"), default="cpu")
    p.add_argument("--qnn-config", metavar="FILE_OR_PRESET", help="preset name in qnn_configs/presets or a JSON file "
                   "(default htp_sim)")
    p.add_argument("--op-package", metavar="LIB", help="QNN HTP op package library that implements the fused ops")
    p.add_argument("--op-package-name", default="HexFuse", help="package name (interface symbol minus "
                   "'InterfaceProvider')")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--profile-runs", type=int, default=3, help="runs in the extra profiled pass")
    p.add_argument("--inputs", metavar="NPZ")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--min-cosine", type=float, default=0.9999)
    p.add_argument("-o", "--report-dir", metavar="REPORT_DIR")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=run)


def options_from_args(args: argparse.Namespace) -> AbOptions:
    return AbOptions(original=args.original, fused=args.fused, ep=args.ep, qnn_config=args.qnn_config,
                     op_package=args.op_package, op_package_name=args.op_package_name, iters=args.iters,
                     warmup=args.warmup, inputs=args.inputs, seed=args.seed, report_dir=args.report_dir,
                     atol=args.atol, rtol=args.rtol, min_cosine=args.min_cosine,
                     profile_runs=args.profile_runs, quiet=args.quiet)


def run(args: argparse.Namespace) -> int:
    """0 when every fused run matches the original; equivalence failure raises after the report is written."""
    rep = run_ab(options_from_args(args))
    if not rep["equivalence"]["passed"]:
        bad = [f"{k}:{o['output']}" for k, e in rep["equivalence"]["runs"].items()
               for o in e["outputs"] if not o["passed"]]
        raise HexfuseError(f"fused model differs from the original ({', '.join(bad)}); see report in "
                           f"{rep['report_dir']}")
    if not args.quiet:
        h = rep.get("headline")
        msg = f"equivalence PASS; report in {rep['report_dir']}"
        if h:
            msg += f"; {h['reference']} -> {h['candidate']}: {h['speedup']:.3f}x " \
                   f"(95% CI {h['ci95'][0]:.3f}-{h['ci95'][1]:.3f})"
        if rep["simulator"]:
            msg += " [x86 HTP simulator: timing functional only]"
        print(msg, file=sys.stderr)
    return 0
