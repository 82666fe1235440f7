"""hexfuse: fuse independent matrix/vector/DMA work of ONNX models for Qualcomm Hexagon NPUs.

Exit codes: 0 success (including "nothing to fuse"), 1 a hexfuse error (bad input, failed check),
2 bad command-line usage. Errors print one line, ``hexfuse: error: ...``; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import json
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
    from hexfuse.graph_passes.report import render_report

    decision = None
    if args.micro_batches:
        from hexfuse import supported_op_types
        from hexfuse.graph_passes.microbatch.decide import analyze_micro_batched

        result, decision = analyze_micro_batched(args.model, args.micro_batches, _scorer(args), supported_op_types(),
                                                 args.split_axis, args.split == "always")
        _say(f"micro-batches: {decision.reason}")
    else:
        result = analyze_model(args.model, _scorer(args))
    if args.json:
        summary = {
            "model": str(args.model),
            "nodes": len(result.analysis.flow.nodes),
            "units_by_engine": result.analysis.engine_histogram(),
            "groups": [
                {"op_type": op.op_type, "predicted_gain": op.predicted_gain,
                 "source": op.source,
                 "tasks": [{"engine": t.engine, "nodes": [n.name for n in t.nodes]} for t in op.tasks]}
                for op in result.fused_ops
            ],
            "not_fused": {result.analysis.task_label(result.analysis.tasks[t]): r for t, r in sorted(result.selection.reasons.items())},
        }
        if decision is not None:
            summary["micro_batches"] = {"split": decision.split, "reason": decision.reason}
        print(json.dumps(summary, indent=1))
    else:
        print(render_report(result, f"analysis of {Path(args.model).name}") + (decision.markdown() if decision else ""))
    return EXIT_OK


def run_fuse(args: argparse.Namespace) -> int:
    from hexfuse.graph_passes.cost.cli import render_cost_markdown, write_cost_reports
    from hexfuse.graph_passes.ort_check import compare_on_cpu
    from hexfuse import fuse_model
    from hexfuse.graph_passes.pipeline import write_outputs
    from hexfuse.graph_passes.report import render_report

    start = time.perf_counter()
    scorer = _scorer(args)
    _say(f"fusing {args.model} for target {scorer.target.name}")
    decision = None
    if args.micro_batches:
        from hexfuse import supported_op_types
        from hexfuse.graph_passes.microbatch.decide import fuse_micro_batched

        result, decision = fuse_micro_batched(args.model, args.micro_batches, scorer, supported_op_types(),
                                              args.split_axis, args.split == "always")
        _say(f"micro-batches: {decision.reason}")
    else:
        result = fuse_model(args.model, scorer)
    analyzed = result.analyzed
    if result.changed and not args.no_verify:
        _say("checking outputs against the original on ONNX Runtime (CPU EP); --no-verify skips this")
        bad = [d for d in compare_on_cpu(analyzed.loaded.raw, result.model_bytes) if not d.equal]
        if bad:
            worst = max(bad, key=lambda d: d.max_rel)
            raise HexfuseError(f"fused model differs from the original on output {worst.name!r} (max rel error {worst.max_rel:.3g}); nothing written")
    out = Path(args.output)
    report = render_report(analyzed, f"fusion of {Path(args.model).name}") + (decision.markdown() if decision else "")
    if result.model_changes:
        report += "\n## Written model\n\nBesides the fused nodes, a runtime sees these changes:\n\n"
        report += "".join(f"- {line}\n" for line in result.model_changes)
    if analyzed.fused_ops:
        report += "\n" + render_cost_markdown(analyzed.fused_ops, scorer)
    write_outputs(result, out, report)
    if analyzed.fused_ops:
        write_cost_reports(analyzed.fused_ops, scorer, out.with_suffix(""))
    seconds = time.perf_counter() - start
    if analyzed.already_fused:
        _say(f"{args.model} is already fused: wrote an unchanged copy to {out}")
    elif not result.changed:
        _say(f"nothing to fuse in {args.model} (see {out.with_suffix('.hexfuse.md')}): wrote an unchanged copy to {out}")
    else:
        _say(f"wrote {out} with {len(result.spec.fused_ops)} fused nodes ({seconds:.2f} s)")
    return EXIT_OK


DESCRIPTION = """\
Fuse independent matrix (HMX), vector (HVX) and DMA work of an ONNX model into single nodes for
Qualcomm Hexagon NPUs, generate the QNN HTP op package that runs them, and measure whether it pays.

  hexfuse analyze MODEL.onnx                  what could be fused, and why not
  hexfuse fuse MODEL.onnx -o OUT.onnx         fused model + fusion spec + report (checked on ORT CPU)
  hexfuse oppkg OUT.onnx -o DIR --build host  the op package's sources (and a host/ORT/HTP build)
  hexfuse ab MODEL.onnx OUT.onnx --ep cpu     A/B: four baselines, equivalence, latency, engine timelines
  hexfuse calibrate PROFILE.csv --model M.onnx --target sm8550 -o NEW.json   fit a cost target

A fused node is a model-local ONNX function, so stock ONNX Runtime runs the fused model unchanged.
"""

EPILOG = """\
exit codes: 0 success (also "nothing to fuse"), 1 an error printed as one line `hexfuse: error: ...`,
2 bad command line. --debug (anywhere on the command line) adds the traceback."""


def _pop_debug(argv: list[str]) -> tuple[list[str], bool]:
    """--debug may stand anywhere, also after the subcommand and its arguments (before a bare --)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    head = [a for a in argv[:cut] if a != "--debug"]
    return head + argv[cut:], len(head) < cut


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hexfuse", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show the traceback on errors (allowed anywhere)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    analyze = commands.add_parser("analyze", help="show what could be fused and why or why not")
    analyze.add_argument("model", help="ONNX model file")
    analyze.add_argument("--json", action="store_true", help="machine-readable output")
    analyze.set_defaults(func=run_analyze)

    fuse = commands.add_parser("fuse", help="write a model with fused nodes, its fusion spec and a report")
    fuse.add_argument("model", help="ONNX model file (never modified)")
    fuse.add_argument("-o", "--output", required=True, help="output model path; spec and report go beside it")
    fuse.add_argument("--no-verify", action="store_true", help="skip the ONNX Runtime output comparison")
    fuse.set_defaults(func=run_fuse)

    for sub in (analyze, fuse):
        sub.add_argument("--min-gain", type=float, default=0.1, help="fuse only above this predicted gain (default 0.1)")
        sub.add_argument("--min-overlap", type=float, default=0.0,
                         help="also require this predicted engine-overlap gain, apart from entry merging (default 0)")
        sub.add_argument("--target", default="sm8550", help=f"cost-model target: {', '.join(list_targets())} or a JSON path")
        sub.add_argument("--micro-batches", type=int, metavar="N", default=0,
                         help="also try N micro-batches along a row-independent axis; kept where predicted faster")
        sub.add_argument("--split", choices=("auto", "always"), default="auto",
                         help="with --micro-batches: auto = split only where predicted faster, always = wherever exact")
        sub.add_argument("--split-axis", type=int, metavar="AXIS", help="with --micro-batches: split this input axis (default: first that works)")

    # Each room registers its own subcommands.
    from hexfuse.graph_passes.cost.cli import register as register_cost
    from hexfuse.graph_passes.merge_cli import register as register_merge
    from hexfuse.op_package.cli import register as register_oppkg
    from hexfuse.tools.ab.cli import register as register_ab

    register_merge(commands)
    register_cost(commands)
    register_oppkg(commands)
    register_ab(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv, debug = _pop_debug(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    args.debug = debug
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
