"""``hexfuse calibrate`` and the cost report helpers that ``hexfuse fuse --target`` calls.

    hexfuse calibrate PROFILE.csv --model MODEL.onnx --target sm8550 -o my_phone.json
    hexfuse fuse MODEL.onnx -o out.onnx --target my_phone.json     (after the lead wires --target)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hexfuse.graph_passes.cost.target import Target, list_targets, load_target, target_from_dict, target_to_dict
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import refuse_overwrite, write_atomic
from hexfuse.graph_passes.spec.model import FusedOp

if TYPE_CHECKING:  # scorer, simulate and timeline import numpy: loaded where used, not for --help
    from hexfuse.graph_passes.cost.scorer import CostScorer
    from hexfuse.graph_passes.cost.timeline import OpPrediction


def scorer_for(target: str | Path | Target, min_gain: float, min_overlap: float = 0.0, *,
               allow_merge_only: bool = False, model: str | Path | None = None,
               engines: str | Path | None = None, use_schedule: bool = True, as_designed: bool = False) -> CostScorer:
    """The scorer for ``--target``/``--min-gain``/``--min-overlap``/``--allow-merge-only``: a bundled
    target name (see ``list_targets()``) or a JSON path. With ``model``, the engine map of that model
    and target comes along: ``engines`` (a file), else one found beside the model or in the cache;
    ``use_schedule=False`` decides by the estimated baselines even where that map holds QNN's schedule;
    ``as_designed`` prices the design's fused node instead of the package as generated (scorer.py)."""
    from hexfuse.graph_passes.cost.scorer import CostScorer

    loaded = target if isinstance(target, Target) else load_target(target)
    scorer = CostScorer(loaded, min_gain, min_overlap, allow_merge_only, use_schedule=use_schedule,
                        as_designed=as_designed)
    if model is not None and Path(model).is_file():  # else the loader says what is wrong with the path
        from hexfuse.graph_passes.engines.engine_map import find_engine_map
        from hexfuse.graph_passes.load.io import file_sha256

        lookup = find_engine_map(model, file_sha256(model), loaded.name, engines)
        scorer.engines, scorer.engines_note = lookup.engine_map, lookup.note
    elif engines is not None and model is None:
        raise HexfuseError("an engine map needs the model it was made from")
    return scorer


def _as_scorer(target: str | Path | Target | CostScorer) -> CostScorer:
    from hexfuse.graph_passes.cost.scorer import CostScorer

    return target if isinstance(target, CostScorer) else scorer_for(target, 0.0)


def predictions(fused_ops: Sequence[FusedOp], scorer: CostScorer) -> list[OpPrediction]:
    """One prediction per op type (its fused nodes are identical up to renaming, so they share it)."""
    from hexfuse.graph_passes.cost.simulate import Infeasible
    from hexfuse.graph_passes.cost.timeline import OpPrediction

    out = []
    for op in fused_ops:
        _, task_costs = scorer.task_costs(op)
        try:
            base = scorer.predict(op)
        except Infeasible:
            base = None
        out.append(OpPrediction(op, base, tuple(task_costs), max(1, len(op.instances))))
    return out


def cost_report_files(fused_ops: Sequence[FusedOp], target: str | Path | Target | CostScorer,
                      out_prefix: Path, plot: bool = False) -> list[tuple[Path, bytes]]:
    """What ``write_cost_reports`` writes, as (path, bytes), for a caller that writes it with more."""
    from hexfuse.graph_passes.cost.timeline import report_files

    scorer = _as_scorer(target)
    return report_files(predictions(fused_ops, scorer), scorer.target, Path(out_prefix), plot)


def write_cost_reports(fused_ops: Sequence[FusedOp], target: str | Path | Target | CostScorer,
                       out_prefix: Path, plot: bool = False) -> list[Path]:
    """Write ``<out_prefix>.timeline.json`` (Perfetto), and ``<out_prefix>.timeline.png`` when ``plot``;
    return the paths written."""
    from hexfuse.graph_passes.cost.timeline import write_reports

    scorer = _as_scorer(target)
    return write_reports(predictions(fused_ops, scorer), scorer.target, Path(out_prefix), plot)


def render_cost_markdown(fused_ops: Sequence[FusedOp], target: str | Path | Target | CostScorer) -> str:
    """A Markdown section: the four baselines, both gains and the quota of every fused op type."""
    from hexfuse.graph_passes.cost.timeline import render_markdown

    scorer = _as_scorer(target)
    return render_markdown(predictions(fused_ops, scorer), scorer.target)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate", help="fit a target's constants from a device profile (QNN CSV, AI Hub JSON) or published latencies",
        description="Read a profile of MODEL (QNN EP profiling CSV with profiling_level=detailed, or the profile JSON "
                    "of a Qualcomm AI Hub profiling job) and write a target JSON whose per-op-class factors and per-op "
                    "overheads reproduce the measured node times; or, with --published, fit the target's constants "
                    "to whole-model latencies (a table like tools/anchors/published.csv) of models on disk.")
    parser.add_argument("profile", nargs="?", help="QNN EP profiling CSV (per-node cycle rows) or AI Hub profile JSON")
    parser.add_argument("--model", help="the ONNX model that was profiled (node names, shapes)")
    parser.add_argument("--published", metavar="TABLE.csv", help="whole-model latencies (columns model, chipset, "
                        "precision, milliseconds; optional onnx = model path relative to the table) instead of a profile")
    parser.add_argument("--models", metavar="DIR", help="with --published: folder of <model>.onnx / <model>_w8a8.onnx "
                        "for rows without an onnx column (default ~/.cache/hexfuse/anchors, tools/anchors/zoo.py)")
    parser.add_argument("--chipset", help="with --published: use the rows of this chipset (default: the base target's name)")
    parser.add_argument("--target", default="sm8550",
                        help=f"base target: one of {', '.join(list_targets())} or a JSON path (default sm8550)")
    parser.add_argument("-o", "--output", required=True, help="the calibrated target JSON to write")
    parser.add_argument("--name", help="name of the new target (default: output file stem)")
    parser.add_argument("--engines", metavar="MAP.json", help="engine map of the model (default: one beside it in "
                        "engines/, else in the cache): which nodes QNN runs on HVX threads")
    parser.add_argument("--keep-overheads", action="store_true",
                        help="keep dispatch_ns and hvx_launch_ns of the base target instead of fitting them")
    parser.add_argument("--allow-simulator", action="store_true",
                        help="fit even a profile from the x86 HTP simulator (its cycles say nothing about a device; "
                        "for testing the tool only)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hexfuse.graph_passes.cost.calibrate import fit_profile, is_hub_profile, simulator_evidence

    if args.published:
        if args.profile or args.model:
            raise HexfuseError("calibrate: give either a profile with --model, or --published, not both")
        return _run_published(args)
    if not args.profile or not args.model:
        raise HexfuseError("calibrate: a profile and --model are needed (or --published TABLE.csv)")
    read = [(Path(args.profile), "the profile"), (Path(args.model), "the model"), (Path(args.target), "the base target")]
    refuse_overwrite([Path(args.output)], [(path, what) for path, what in read if path.exists()])
    base = load_target(args.target)
    simulated = None if is_hub_profile(args.profile) else simulator_evidence(args.profile)
    if simulated and not args.allow_simulator:
        raise HexfuseError(f"{args.profile} comes from the HTP simulator ({simulated}): simulator cycles say nothing "
                           "about a device, so no device figures are fitted from it (--allow-simulator to fit anyway)")
    if simulated:
        print(f"hexfuse: warning: {args.profile} comes from the HTP simulator ({simulated}); the fitted target "
              "describes the simulator, not a device", file=sys.stderr)
    from hexfuse.graph_passes.engines.engine_map import find_engine_map
    from hexfuse.graph_passes.load.io import file_sha256

    lookup = find_engine_map(args.model, file_sha256(args.model), base.name, args.engines)
    if lookup.engine_map is not None and lookup.engine_map.path:
        refuse_overwrite([Path(args.output)], [(Path(lookup.engine_map.path), "the engine map")])
    fit = fit_profile(args.profile, args.model, base, lookup.engine_map, overheads=not args.keep_overheads)
    out = Path(args.output)
    name = args.name or out.stem
    source = f"{'SIMULATOR profile ' if simulated else ''}{Path(args.profile).name}"
    fitted = fit.target.with_values(name=name, description=f"{base.description}; calibrated from {source}")
    _write_target(out, fitted, args.profile)
    classes = ", ".join(f"{c} x{fit.factors[c]:.3g} ({n} nodes)" for c, n in sorted(fit.nodes_used.items()))
    engines = ", ".join(f"{engine} {count}" for engine, count in fit.rows_by_engine.items())
    print(f"hexfuse: calibrated {name}: {classes}; {fit.overheads}; {lookup.note}; median |log error| {fit.residual:.3f}; "
          f"{len(fit.skipped)} profile rows matched no model node; rows by engine: {engines}; wrote {out}",
          file=sys.stderr)
    return 0


def _write_target(out: Path, fitted, measured: str) -> None:
    """Write the fitted target only if it loads: a fit to degenerate figures refuses, naming them."""
    data = target_to_dict(fitted)
    try:
        target_from_dict(json.loads(json.dumps(data)), str(out))
    except HexfuseError as exc:
        raise HexfuseError(f"the fit to {measured} gives no valid target ({exc}); nothing written") from None
    write_atomic(out, (json.dumps(data, indent=1) + "\n").encode())


def _run_published(args: argparse.Namespace) -> int:
    """``--published``: fit to whole-model latencies (calibrate.fit_published)."""
    from hexfuse.graph_passes.cost.calibrate import fit_published, published_model_path, read_published

    out = Path(args.output)
    read = [(Path(args.published), "the published table"), (Path(args.target), "the base target"),
            *((published_model_path(row, args.published, args.models), "a model the table names")
              for row in read_published(args.published))]
    refuse_overwrite([out], [(path, what) for path, what in read if path.exists()])
    base = load_target(args.target)
    fitted, note = fit_published(args.published, base, args.chipset or base.name, args.models,
                                 overheads=not args.keep_overheads)
    name = args.name or out.stem
    fitted = fitted.with_values(name=name, description=f"{base.description}; fitted to {Path(args.published).name}")
    _write_target(out, fitted, args.published)
    print(f"hexfuse: calibrated {name}: {note}; wrote {out}", file=sys.stderr)
    return 0
