"""hexfuse: fuse independent matrix/vector/DMA work of ONNX models for Qualcomm Hexagon NPUs.

Exit codes: 0 success (including "nothing to fuse"), 1 a hexfuse error (bad input, failed check),
2 bad command-line usage, 128 + N when stopped by signal N (130 SIGINT, 143 SIGTERM). Errors print one
line, ``hexfuse: error: ...``; ``--debug`` adds the traceback.

SIGTERM is turned into an exception like Ctrl-C's KeyboardInterrupt, so that every command unwinds
through its ``finally`` blocks: temporary files and folders are removed, and output sets are renamed
into place with both signals held back (graph_passes/load/io.py), so they are all new or all old.

Arguments are parsed before anything heavy is imported: ``COMMANDS`` names each subcommand's module and
one-line help, ``hexfuse --help`` builds only that list, and a subcommand imports its own module alone
(onnx, numpy and ONNX Runtime load only when a command needs them).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import importlib
import importlib.resources
import shlex
from typing import TYPE_CHECKING

from hexfuse.graph_passes.errors import HexfuseError

if TYPE_CHECKING:
    from hexfuse.graph_passes.cost.scorer import CostScorer

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _say(message: str) -> None:
    print(f"hexfuse: {message}", file=sys.stderr, flush=True)


def _targets() -> list[str]:
    """Bundled target names, read from the data folder (without importing the cost model)."""
    folder = importlib.resources.files("hexfuse.qnn_configs") / "targets"
    return sorted(entry.name[:-5] for entry in folder.iterdir() if entry.name.endswith(".json"))


def _scorer(args: argparse.Namespace) -> CostScorer:
    """One scorer per run: it caches per-task costs across all candidate groups."""
    from hexfuse.graph_passes.cost.cli import scorer_for

    for flag, value in (("--min-gain", args.min_gain), ("--min-overlap", args.min_overlap)):
        if not 0.0 <= value < 1.0:
            raise HexfuseError(f"{flag} must be in [0, 1), got {value}")
    if (args.engines or "").lower() == "none":  # the op-type rules, even where a map exists
        scorer = scorer_for(args.target, args.min_gain, args.min_overlap, allow_merge_only=args.allow_merge_only,
                            as_designed=args.as_designed)
        scorer.engines_note = "no engine map (--engines none): op-type rules decide"
        return scorer
    return scorer_for(args.target, args.min_gain, args.min_overlap, allow_merge_only=args.allow_merge_only,
                      model=args.model, engines=args.engines, use_schedule=not args.ignore_schedule,
                      as_designed=args.as_designed)


def _run_pass(args: argparse.Namespace, scorer: CostScorer, fuse: bool):
    """analyze or fuse the model as the options say: (result, micro-batch decision or None)."""
    from hexfuse.graph_passes.load.model import fixed_dims, parse_fix_dims

    pins = parse_fix_dims(args.fix_dim or ())
    with fixed_dims(pins):
        return _run_pass_pinned(args, scorer, fuse)


def _dynamic_hint(result) -> str:
    """'; symbolic dims N, S: ...' where the loaded model still has dynamic shapes, else ''."""
    from hexfuse.graph_passes.load.model import pin_arguments, symbolic_dims

    loaded = getattr(result, "analyzed", result).loaded
    dims = symbolic_dims(loaded.model.graph)
    if not dims:
        return ""
    pins = " ".join(f"--fix-dim {shlex.quote(pin)}" for pin in pin_arguments(loaded.model.graph))
    named = ", ".join(dims)
    if not pins:  # only outputs are declared dynamic: the inputs are static and inference sizes the rest
        return ""
    return f"; dynamic shapes (symbolic dims {named}) are never fused: pin the inputs' with {pins} (the outputs follow)"


def _package_hint(result, args: argparse.Namespace) -> str:
    """'; N tasks would pair but for ...' where some group lost only to what the generated package adds,
    and what --as-designed (the what-if that prices the design's fused node) then does: run, not guessed."""
    from hexfuse.graph_passes.cost.scorer import PACKAGE_REASON
    from hexfuse.graph_passes.report.document import reason_kind

    reasons = getattr(result, "analyzed", result).selection.reasons.values()
    lost = sum(1 for reason in reasons if PACKAGE_REASON in reason)
    if not lost or args.as_designed:
        return ""
    hint = (f"; {_count(lost, 'task')} would pair but for what the generated package adds to hold a group together "
            "(entry, joins, ports in main memory, QNN's copies)")
    designed = argparse.Namespace(**{**vars(args), "as_designed": True, "micro_batches": 0})
    what_if = _run_pass(designed, _scorer(designed), fuse=False)[0]
    if what_if.fused_ops:
        return (f"{hint}: priced as designed (--as-designed, a what-if: the design's single VTCM entry, which the "
                f"package does not build) {_count(len(what_if.fused_nodes), 'group')} would fuse")
    kinds = Counter(reason_kind(reason) for reason in what_if.selection.reasons.values())
    top = f" (most often: {kinds.most_common(1)[0][0]})" if kinds else ""
    return f"{hint}; priced as designed (--as-designed) none pays either{top}"


def _run_pass_pinned(args: argparse.Namespace, scorer: CostScorer, fuse: bool):
    from hexfuse import analyze_model, backend, fuse_model

    if not args.micro_batches:
        run = fuse_model if fuse else analyze_model
        return run(args.model, scorer, args.allow_scalar), None
    from hexfuse.graph_passes.microbatch.decide import analyze_micro_batched, fuse_micro_batched

    if fuse:
        result, decision = fuse_micro_batched(args.model, args.micro_batches, scorer, backend(args.allow_scalar),
                                              args.split_axis, args.split == "always", args.force)
    else:
        result, decision = analyze_micro_batched(args.model, args.micro_batches, scorer, backend(args.allow_scalar),
                                                 args.split_axis, args.split == "always")
    _say(f"micro-batches: {decision.reason}")
    return result, decision


def run_analyze(args: argparse.Namespace) -> int:
    from hexfuse.graph_passes.report.document import render_report
    from hexfuse.graph_passes.report.outputs import analysis_report, report_json

    scorer = _scorer(args)
    result, decision = _run_pass(args, scorer, fuse=False)
    data = analysis_report(result, scorer, f"analysis of {Path(args.model).name}")
    if decision is not None:
        data["micro_batches"] = {"split": decision.split, "reason": decision.reason}
    print(report_json(data) if args.json else render_report(data) + (decision.markdown() if decision else ""))
    hint = _dynamic_hint(result) + (_package_hint(result, args) if not result.fused_ops else "")
    if hint and not result.fused_ops:
        _say(f"nothing to fuse in {args.model}{hint}")
    _say_combine_hint(result.loaded, scorer)
    return EXIT_OK


def _say_combine_hint(loaded, scorer: CostScorer) -> None:
    """Where the model holds several requests sharing weights, what `hexfuse combine` would do for them."""
    from hexfuse.graph_passes.combine.run import combine_hint

    hint = combine_hint(loaded.inferred, scorer.target)
    if hint:
        _say(hint)


def run_fuse(args: argparse.Namespace) -> int:
    from hexfuse.graph_passes.report.outputs import check_outputs, write_fused

    start = time.perf_counter()
    if not Path(args.output).name:  # '', '.', '/': no file name to put the spec and report beside
        raise HexfuseError(f"-o {args.output!r}: not a file path, expected an output .onnx path")
    model = Path(args.model)
    if not model.is_file() and (model.is_dir() or not model.exists()):  # before any word of progress
        raise HexfuseError(f"{args.model}: " + ("is a directory, expected an .onnx file" if model.is_dir() else "no such file"))
    scorer = _scorer(args)
    _say(f"fusing {args.model} for target {scorer.target.name}")
    result, decision = _run_pass(args, scorer, fuse=True)
    analyzed = result.analyzed
    out = Path(args.output)
    check_outputs(result, out, scorer, args.plot)
    if result.changed and not args.no_verify:
        _say("verifying the fused model on ONNX Runtime (CPU EP); --no-verify skips this")
    write_fused(result, out, scorer, check=not args.no_verify, plot=args.plot,
                extra_markdown=decision.markdown() if decision else "")
    seconds = time.perf_counter() - start
    if analyzed.already_fused:
        carried = (f"with its spec ({len(result.spec.fused_ops)} op types)" if result.spec.fused_ops else
                   f"without a spec: none beside {args.model}, so `hexfuse oppkg` cannot use the copy")
        _say(f"{args.model} is already fused: wrote an unchanged copy to {out} {carried}")
    elif not result.changed:
        _say(f"nothing to fuse in {args.model} (see {out.with_suffix('.hexfuse.md')}): wrote an unchanged copy to "
             f"{out}{_dynamic_hint(result)}{_package_hint(result, args)}")
    else:
        split = f" split into {result.split} micro-batches," if result.split > 1 else ""
        what = (f"{_count(len(analyzed.fused_nodes), 'fused node')} calling {_count(len(result.spec.fused_ops), 'op type')}"
                if analyzed.fused_nodes else "no fused node")
        _say(f"wrote {out}{split} with {what} ({seconds:.2f} s)")
    _say_combine_hint(analyzed.loaded, scorer)
    return EXIT_OK


DESCRIPTION = """\
Fuse independent matrix (HMX), vector (HVX) and DMA work of an ONNX model into single nodes for
Qualcomm Hexagon NPUs, generate the QNN HTP op package that runs them, and measure whether it pays.

  hexfuse analyze MODEL.onnx                  what could be fused, and why not
  hexfuse fuse MODEL.onnx -o OUT.onnx         fused model + fusion spec + report (checked on ORT CPU)
  hexfuse merge A.onnx B.onnx -o AB.onnx      two or more models (a prefill, decodes) as one graph of requests
  hexfuse combine AB.onnx -o C.onnx           requests sharing weights run as one batch (weights read once)
  hexfuse oppkg OUT.onnx -o DIR --build host  the op package's sources (and a host/ORT/HTP build)
  hexfuse ab MODEL.onnx OUT.onnx --ep cpu     A/B: four baselines, equivalence, latency, engine timelines
  hexfuse calibrate PROFILE.csv --model M.onnx --target sm8550 -o NEW.json   fit a cost target
  hexfuse engines MODEL.onnx --target sm8650  what QNN runs on which engine (HTP simulator, optrace)
  hexfuse optrace SCHEMATIC                   engines and run lists per fused node of an optrace dump
  hexfuse compile MODEL.onnx -o CTX.onnx      prepare on x86 (HTP) and write the EPContext model
  hexfuse bundle MODEL.onnx OUT.onnx -o DIR   one folder to run the A/B on a Snapdragon device

A fused node is a model-local ONNX function, so stock ONNX Runtime runs the fused model unchanged.
"""

EPILOG = """\
exit codes: 0 success (also "nothing to fuse"), 1 an error printed as one line `hexfuse: error: ...`,
2 bad command line, 130/143 stopped by SIGINT/SIGTERM (outputs all written or untouched, temporaries
removed). --debug (anywhere on the command line) adds the traceback."""


def _pop_debug(argv: list[str]) -> tuple[list[str], bool]:
    """--debug may stand anywhere, also after the subcommand and its arguments (before a bare --)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    head = [a for a in argv[:cut] if a != "--debug"]
    return head + argv[cut:], len(head) < cut


# Subcommand -> (module whose register() adds it, or None for this module's own; its one-line help).
# The help is what `hexfuse --help` prints without importing the module (tests/test_cli.py holds them equal).
COMMANDS: dict[str, tuple[str | None, str]] = {
    "analyze": (None, "show what could be fused and why or why not"),
    "fuse": (None, "write a model with fused nodes, its fusion spec and a report"),
    "merge": ("hexfuse.graph_passes.merge.cli", "merge models (e.g. a prefill and decodes) into one graph of requests"),
    "combine": ("hexfuse.graph_passes.combine.cli", "run requests that share a model as one batch (weights read once)"),
    "calibrate": ("hexfuse.graph_passes.cost.cli", "fit a target's constants from a device profile (QNN CSV, AI Hub JSON) or published latencies"),
    "oppkg": ("hexfuse.op_package.cli", "generate the QNN HTP op package of a fused model"),
    "ab": ("hexfuse.tools.ab.cli", "A/B original vs fused model: four baselines, equivalence, latency, profiles"),
    "compile": ("hexfuse.tools.device.cli", "prepare a model on x86 (HTP) and write its EPContext model"),
    "bundle": ("hexfuse.tools.device.cli", "one folder to run the A/B on a Snapdragon device"),
    "optrace": ("hexfuse.tools.optrace_cli", "read an HTP optrace schematic: engines and run lists per fused node"),
    "engines": ("hexfuse.tools.qnn_engines_cli", "engine map of a model: QNN's kernels and resources per ONNX node"),
}

ANALYZE_DESCRIPTION = """\
Find independent work of different engines (matrix on HMX, vector on HVX, moves) that could run as one
fused node, price each candidate group with the target's cost model and print which groups would be
fused and why the others are not. Reads the model only; writes nothing (`hexfuse fuse` writes)."""

FUSE_DESCRIPTION = """\
Fuse the groups `hexfuse analyze` accepts: write OUT.onnx (each group a model-local ONNX function),
OUT.hexfuse.json (the fusion spec `hexfuse oppkg` reads) and OUT.hexfuse.md (the report), after checking
on ONNX Runtime (CPU EP) that the fused model computes what the original computes. The input file is
never modified; the three outputs are written together or not at all."""


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """The parser. ``command``: the subcommand about to run, whose module alone is imported; None:
    only the list of subcommands (for --help and usage errors); "*": every subcommand in full."""
    parser = argparse.ArgumentParser(prog="hexfuse", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show the traceback on errors (allowed anywhere)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = COMMANDS[command][0] if command in COMMANDS else None
    for name, (module, help_text) in COMMANDS.items():
        if name in commands.choices:
            continue  # registered with another command of its module
        if command != "*" and name != command and (module is None or module != chosen):
            commands.add_parser(name, help=help_text, add_help=False)  # listed; its arguments load when it runs
        elif module is None:
            _register_pass_commands(commands, name)
        else:
            importlib.import_module(module).register(commands)
    return parser


def _register_pass_commands(commands: argparse._SubParsersAction, name: str) -> None:
    if name == "analyze":
        analyze = commands.add_parser("analyze", help=COMMANDS["analyze"][1], description=ANALYZE_DESCRIPTION)
        analyze.add_argument("model", help="ONNX model file")
        analyze.add_argument("--json", action="store_true", help="machine-readable output")
        analyze.set_defaults(func=run_analyze)
        _pass_options(analyze)
        return
    fuse = commands.add_parser("fuse", help=COMMANDS["fuse"][1], description=FUSE_DESCRIPTION)
    fuse.add_argument("model", help="ONNX model file (never modified)")
    fuse.add_argument("-o", "--output", required=True, help="output model path; spec and report go beside it")
    fuse.add_argument("--no-verify", action="store_true", help="skip the check on ONNX Runtime (graph_passes/rewrite/verify.py)")
    fuse.add_argument("--plot", action="store_true", help="also draw OUT.timeline.png (matplotlib; slow on small models)")
    fuse.add_argument("--force", action="store_true",
                      help="with --split always: write the split even where it is predicted slower than unsplit")
    fuse.set_defaults(func=run_fuse)
    _pass_options(fuse)


def _pass_options(sub: argparse.ArgumentParser) -> None:
    """Options analyze and fuse share."""
    sub.add_argument("--min-gain", type=float, default=0.1, help="fuse only above this predicted gain (default 0.1)")
    sub.add_argument("--min-overlap", type=float, default=0.0,
                     help="also require this predicted engine-overlap gain, apart from entry merging (default 0)")
    sub.add_argument("--target", default="sm8550",
                     help=f"cost-model target: {', '.join(_targets())} or a JSON path (default sm8550)")
    sub.add_argument("--allow-scalar", action="store_true",
                     help="also fuse vector tasks whose kernels have no HVX path yet (they run as scalar C on "
                          "HTP: for host runs and simulator checks, not for speed)")
    sub.add_argument("--allow-merge-only", action="store_true",
                     help="also fuse groups predicted to gain by entry merging alone (default on HTP: only engine overlap)")
    sub.add_argument("--as-designed", action="store_true",
                     help="what-if: price fused nodes as the design has them (one entry, task tensors resident in "
                          "VTCM, a DMA lane) instead of as the generated package builds them (entry and joins with "
                          "ports in main memory and QNN's copies for them; every task but the matrix work on an HVX "
                          "thread), which loses on every model measured (docs/where-it-pays.md); no effect where "
                          "QNN's schedule decides")
    sub.add_argument("--engines", metavar="MAP.json", help="engine map of the model (`hexfuse engines`; default: "
                     "one beside the model in engines/, else in the cache; none: op-type rules)")
    sub.add_argument("--ignore-schedule", action="store_true",
                     help="decide by the estimated cost model even where the engine map holds QNN's schedule of the "
                          "model (whose replay decides by default): to build and measure groups the replay rejects")
    sub.add_argument("--micro-batches", type=int, metavar="N", default=0,
                     help="also try N micro-batches along a row-independent axis; kept where predicted faster")
    sub.add_argument("--split", choices=("auto", "always"), default="auto",
                     help="with --micro-batches: auto = split only where predicted faster, always = wherever exact "
                          "(fuse refuses a split predicted slower unless --force; default auto)")
    sub.add_argument("--split-axis", type=int, metavar="AXIS", help="with --micro-batches: split this input axis (default: first that works)")
    sub.add_argument("--fix-dim", action="append", metavar="NAME=VALUE",
                     help="pin a symbolic dimension (e.g. N=1) on the graph's inputs, outputs and value_info "
                          "before shape inference, as ONNX Runtime's make_dynamic_shape_fixed; repeatable")


class Terminated(KeyboardInterrupt):
    """SIGTERM raised in the main thread, unwinding like Ctrl-C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_stopped_by: list[int] = []  # a signal the handler raised for: a C extension may turn it into ImportError


def _raise_terminated(signum: int, frame: object) -> None:
    _stopped_by.append(signum)
    raise Terminated(signum)


@contextlib.contextmanager
def _signals_as_exceptions() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    _stopped_by.clear()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _stopped(signum: int) -> int:
    print(f"hexfuse: error: stopped by {signal.Signals(signum).name}: outputs are all written or untouched, "
          "temporary files removed", file=sys.stderr)
    return 128 + signum


def _import_before_handlers() -> None:
    """Load onnx and numpy (through the pass) once the arguments parse and before SIGTERM becomes an
    exception: raised inside a C extension's module initialisation, it left the interpreter crashing
    with SIGSEGV at exit (seen under test_interrupts). A SIGTERM during these imports ends the process
    the default way, with nothing written yet; a Ctrl-C is main()'s one line and 130."""
    importlib.import_module("hexfuse.graph_passes.pipeline")


def _command_of(argv: list[str]) -> str | None:
    """The subcommand the command line names (the first word that is not an option), if known."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv, debug = _pop_debug(list(sys.argv[1:] if argv is None else argv))
    try:  # parsing and the imports too: Ctrl-C in the first moments is one line, as later
        parser = build_parser(_command_of(argv))
        args = parser.parse_args(argv)
        args.debug = debug
        _import_before_handlers()
        with _signals_as_exceptions():
            return args.func(args)
    except HexfuseError as exc:
        if debug:
            raise
        print(f"hexfuse: error: {' '.join(str(exc).splitlines())}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt as exc:
        if debug:
            raise
        return _stopped(exc.signum if isinstance(exc, Terminated) else signal.SIGINT)
    except Exception as exc:  # a bug: still one line, and --debug shows where
        if debug:
            raise
        if _stopped_by:  # the signal landed inside a C extension's import, which re-raised it as another type
            return _stopped(_stopped_by[-1])
        print(f"hexfuse: error: internal error ({_one_line(exc)[:300]}); rerun with --debug for the traceback",
              file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
