"""hexfuse: fuse independent matrix/vector/DMA work of ONNX models for Qualcomm Hexagon NPUs.

Exit codes: 0 success (including "nothing to fuse"), 1 a hexfuse error (bad input, failed check),
2 bad command-line usage. Errors print one line, ``hexfuse: error: ...``; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hexfuse.graph_passes.cost import list_targets
from hexfuse.graph_passes.cost.cli import scorer_for
from hexfuse.graph_passes.cost.scorer import CostScorer
from hexfuse.graph_passes.errors import HexfuseError

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def _say(message: str) -> None:
    print(f"hexfuse: {message}", file=sys.stderr, flush=True)


def _scorer(args: argparse.Namespace) -> CostScorer:
    """One scorer per run: it caches per-task costs across all candidate groups."""
    for flag, value in (("--min-gain", args.min_gain), ("--min-overlap", args.min_overlap)):
        if not 0.0 <= value < 1.0:
            raise HexfuseError(f"{flag} must be in [0, 1), got {value}")
    return scorer_for(args.target, args.min_gain, args.min_overlap)


def run_analyze(args: argparse.Namespace) -> int:
    from hexfuse import analyze_model
    from hexfuse.graph_passes.outputs import analysis_report, report_json
    from hexfuse.graph_passes.report import render_report

    scorer = _scorer(args)
    data = analysis_report(analyze_model(args.model, scorer), scorer, f"analysis of {Path(args.model).name}")
    print(report_json(data) if args.json else render_report(data))
    return EXIT_OK


def run_fuse(args: argparse.Namespace) -> int:
    from hexfuse import fuse_model
    from hexfuse.graph_passes.outputs import write_fused

    start = time.perf_counter()
    scorer = _scorer(args)
    _say(f"fusing {args.model} for target {scorer.target.name}")
    result = fuse_model(args.model, scorer)
    analyzed = result.analyzed
    if result.changed and not args.no_verify:
        _say("verifying the fused model on ONNX Runtime (CPU EP); --no-verify skips this")
    out = Path(args.output)
    write_fused(result, out, scorer, check=not args.no_verify, plot=args.plot)
    seconds = time.perf_counter() - start
    if analyzed.already_fused:
        _say(f"{args.model} is already fused: wrote an unchanged copy to {out}")
    elif not result.changed:
        _say(f"nothing to fuse in {args.model} (see {out.with_suffix('.hexfuse.md')}): wrote an unchanged copy to {out}")
    else:
        _say(f"wrote {out} with {len(analyzed.fused_nodes)} fused nodes calling {len(result.spec.fused_ops)} op types "
             f"({seconds:.2f} s)")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hexfuse", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    analyze = commands.add_parser("analyze", help="show what could be fused and why or why not")
    analyze.add_argument("model", help="ONNX model file")
    analyze.add_argument("--json", action="store_true", help="machine-readable output")
    analyze.set_defaults(func=run_analyze)

    fuse = commands.add_parser("fuse", help="write a model with fused nodes, its fusion spec and a report")
    fuse.add_argument("model", help="ONNX model file (never modified)")
    fuse.add_argument("-o", "--output", required=True, help="output model path; spec and report go beside it")
    fuse.add_argument("--no-verify", action="store_true", help="skip the check on ONNX Runtime (graph_passes/verify.py)")
    fuse.add_argument("--plot", action="store_true", help="also draw OUT.timeline.png (matplotlib; slow on small models)")
    fuse.set_defaults(func=run_fuse)

    for sub in (analyze, fuse):
        sub.add_argument("--min-gain", type=float, default=0.1, help="fuse only above this predicted gain (default 0.1)")
        sub.add_argument("--min-overlap", type=float, default=0.0,
                         help="also require this predicted engine-overlap gain, apart from entry merging (default 0)")
        sub.add_argument("--target", default="sm8550", help=f"cost-model target: {', '.join(list_targets())} or a JSON path")

    # Each room registers its own subcommands.
    from hexfuse.graph_passes.cost.cli import register as register_cost
    from hexfuse.op_package.cli import register as register_oppkg
    from hexfuse.tools.ab.cli import register as register_ab

    register_cost(commands)
    register_oppkg(commands)
    register_ab(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except HexfuseError as exc:
        if args.debug:
            raise
        print(f"hexfuse: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("hexfuse: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
