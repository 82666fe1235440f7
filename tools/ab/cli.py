"""`hexfuse ab ORIGINAL.onnx FUSED.onnx ...`: argparse wiring; the work is in runner.py."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

from .options import AbOptions, check_options

_D = AbOptions("", "")  # defaults, printed by --help

DESCRIPTION = """\
Run ORIGINAL and FUSED on the same inputs, check that every fused run computes what the original does,
and time the four baselines interleaved: (1) original serial, (2) best existing concurrency,
(3) one entry internally serial, (4) one entry internally concurrent; the entry-merge gain (1->3) and
the overlap gain (3->4) are reported apart, with paired bootstrap 95% CIs.

Exit 1 with one line `hexfuse: error: ...` whenever a run did not run as asked: outputs differ, a
session fell back to or was retried on another EP, the fused model put more nodes on the CPU or in more
partitions than the original, or an op package did not claim every fused node. See docs/ab.md."""


def register(subparsers) -> None:
    p = subparsers.add_parser("ab", help="A/B original vs fused model: four baselines, equivalence, latency, profiles",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("original", metavar="ORIGINAL.onnx", nargs="?", help="the model as it was before `hexfuse fuse`")
    p.add_argument("fused", metavar="FUSED.onnx", nargs="?", help="the fused model (its .hexfuse.json spec beside it "
                   "builds the CPU custom-op library)")
    p.add_argument("--import", dest="import_dir", metavar="RESULTS", help="report the results folder run_ab.py of a "
                   "`hexfuse bundle` wrote (device or simulator) instead of running; models from the bundle, or "
                   "ORIGINAL FUSED as given to `hexfuse bundle`; leads with each fused node's task op ∩ own HMX "
                   "time from the optrace timeline (docs/device.md section 5)")
    p.add_argument("--ep", choices=("cpu", "qnn"), default=_D.ep,
                   help="execution provider: cpu (ONNX Runtime CPU EP) or qnn (QNN EP, HTP backend; a simulator on "
                   f"x86) (default {_D.ep})")
    p.add_argument("--qnn-config", metavar="FILE_OR_PRESET", help="--ep qnn: preset name in qnn_configs/presets or a "
                   "JSON file (default htp_sim)")
    p.add_argument("--op-package", metavar="LIB", help="library that runs the fused nodes: with --ep qnn a QNN HTP op "
                   "package (exports <Pkg>InterfaceProvider); with --ep cpu an ONNX Runtime custom-op library "
                   "(`hexfuse oppkg FUSED -o DIR --build ort`; default: built from the spec beside FUSED)")
    p.add_argument("--op-package-name", default=_D.op_package_name,
                   help=f"package name: the interface symbol minus 'InterfaceProvider' (default {_D.op_package_name})")
    p.add_argument("--no-cpu-package", dest="cpu_package", action="store_false",
                   help="--ep cpu: do not build the custom-op library; baselines 3 and 4 are then unavailable")
    p.add_argument("--iters", type=int, default=_D.iters, help=f"timed iterations per run, interleaved "
                   f"(default {_D.iters})")
    p.add_argument("--warmup", type=int, default=_D.warmup, help=f"untimed iterations first (default {_D.warmup})")
    p.add_argument("--profile-runs", type=int, default=_D.profile_runs,
                   help=f"runs in the extra profiled pass per run (default {_D.profile_runs})")
    p.add_argument("--inputs", metavar="NPZ", help="input tensors (.npz with exactly the model's input names, dtypes "
                   "and shapes; default: seeded random tensors, symbolic dims = 1)")
    p.add_argument("--seed", type=int, default=_D.seed,
                   help=f"seed of the random inputs and the bootstrap (>= 0, default {_D.seed})")
    p.add_argument("--atol", type=float, default=_D.atol, help=f"absolute tolerance per element (default {_D.atol})")
    p.add_argument("--rtol", type=float, default=_D.rtol, help=f"relative tolerance per element (default {_D.rtol})")
    p.add_argument("--min-cosine", type=float, default=_D.min_cosine,
                   help=f"minimum cosine similarity per output (default {_D.min_cosine})")
    p.add_argument("-o", "--report-dir", metavar="REPORT_DIR",
                   help="where report.json/.md, trace.json, latency.png and profiles go (default <FUSED stem>_ab/ "
                        "in the working folder)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress or summary on stderr (errors still print)")
    p.set_defaults(func=run, ab_parser=p)


def options_from_args(args: argparse.Namespace) -> AbOptions:
    return AbOptions(original=args.original, fused=args.fused, ep=args.ep, qnn_config=args.qnn_config,
                     op_package=args.op_package, op_package_name=args.op_package_name, iters=args.iters,
                     warmup=args.warmup, inputs=args.inputs, seed=args.seed, report_dir=args.report_dir,
                     atol=args.atol, rtol=args.rtol, min_cosine=args.min_cosine,
                     profile_runs=args.profile_runs, quiet=args.quiet, cpu_package=args.cpu_package)


def _figure(s: dict) -> str:
    """'1.234x (95% CI 1.1-1.3; rounds 1.15-1.31, significant)': the CI within the run, the spread between rounds."""
    text = f"{s['speedup']:.3f}x (95% CI {s['ci95'][0]:.3f}-{s['ci95'][1]:.3f}"
    spread = s.get("round_spread")
    if spread:
        text += f"; {len(s['rounds'])} rounds {spread[0]:.3f}-{spread[1]:.3f}"
    if "significant" in s:
        text += "; significant" if s["significant"] else (
            ("; not significant: the rounds disagree" if s["rounds"] else "; not significant: too few iterations for rounds")
            if s.get("significant_within_run") else "; not significant")
    return text + ")"


def _gain(rep: dict, name: str) -> str:
    s = rep["speedups"].get(name)
    return "" if s is None else _figure(s)


def summary_line(rep: dict) -> str:
    """Like-for-like figures first (same kernels on both sides), then original -> fused, marked where it
    also compares different kernels (CPU EP: ONNX Runtime's against hexfuse's host kernels)."""
    msg = f"equivalence PASS; report in {rep['report_dir']}"
    merge = ("entry merge 1k->3 (same kernels)", "entry_merge_gain_same_kernels_1k_to_3")
    if not _gain(rep, merge[1]):
        merge = ("entry merge 1->3", "entry_merge_gain_1_to_3")
    for label, name in (merge, ("overlap 3->4", "overlap_gain_3_to_4")):
        if _gain(rep, name):
            msg += f"; {label}: {_gain(rep, name)}"
    missing = next((b for b in rep["baselines"] if b["key"] == "b3_fused_serial" and not b["available"]), None)
    if missing:  # said before any figure that compares different kernels, so that none leads the line
        msg += f"; baselines 3/4 not measured: {missing['reason']}"
    h = rep.get("headline")
    if h:
        unlike = " (different kernels: " + h["note"].split(": ", 1)[-1] + ")" if h.get("note") else ""
        msg += f"; {h['reference']} -> {h['candidate']}{unlike}: {_figure(h)}"
    if rep["simulator"]:
        msg += " [x86 HTP simulator: timing functional only]"
    return msg


def _imported(args: argparse.Namespace) -> dict:
    from .imported import import_results

    for flag, value in (("--op-package", args.op_package), ("--qnn-config", args.qnn_config),
                        ("--inputs", args.inputs)):
        if value:
            raise HexfuseError(f"{flag} does not apply to --import (the bundle fixed it)")
    results = Path(args.import_dir)
    o = AbOptions(original=str(results / "results.json"), fused=str(results / "results.json"), ep="qnn",
                  report_dir=args.report_dir or f"{results.resolve()}_ab", atol=args.atol, rtol=args.rtol,
                  min_cosine=args.min_cosine, seed=args.seed, quiet=args.quiet)
    check_options(o)
    return import_results(args.import_dir, o, args.original, args.fused)


def run(args: argparse.Namespace) -> int:
    """0 when every fused run matches the original; equivalence failure raises after the report is written."""
    if args.import_dir:
        rep = _imported(args)
    elif not (args.original and args.fused):
        args.ab_parser.error("ORIGINAL.onnx and FUSED.onnx are required (or --import RESULTS)")
    else:
        from .runner import run_ab  # onnx, numpy, ONNX Runtime: not for --help or a usage error

        rep = run_ab(options_from_args(args))
    if not rep["equivalence"]["passed"]:
        bad = [f"{k}:{o['output']}" for k, e in rep["equivalence"]["runs"].items()
               for o in e["outputs"] if not o["passed"]]
        raise HexfuseError(f"fused model differs from the original ({', '.join(bad)}); see report in "
                           f"{rep['report_dir']}")
    if not args.quiet:
        for line in rep.get("device_overlap", {}).get("lines", []):  # --import: the device's answer first
            print(f"hexfuse: {line}", file=sys.stderr)
        print(summary_line(rep), file=sys.stderr)
    return 0
