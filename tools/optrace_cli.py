"""`hexfuse optrace SCHEMATIC`: what the HTP scheduler did with a graph (tools/optrace.py)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

DESCRIPTION = """\
Read the optrace schematic the QNN EP writes with profiling_level=optrace (<graph>_schematic.bin in the
working folder) and show, per hexfuse fused node, which ops QNN made of it, on which engine (HMX, HVX,
DMA, main thread) and where in the run lists: the matrix work as QNN's own ops, the task ops launched
on HVX threads, and whether the two may run together: read from QNN's happens-before graph (main-list
order plus checkpoint gates), not from run-list positions, which are a display order, not time."""


def register(subparsers) -> None:
    p = subparsers.add_parser("optrace", help="read an HTP optrace schematic: engines and run lists per fused node",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("schematic", metavar="SCHEMATIC", help="a *_schematic.bin file, or a folder holding one")
    p.add_argument("--png", metavar="OUT.png", help="also draw the engine lanes (fused nodes highlighted)")
    p.add_argument("--trace", metavar="OUT.json", help="also write a Perfetto trace (one lane per engine)")
    p.add_argument("--json", action="store_true", help="print the per-fused-node schedule as JSON")
    p.add_argument("--against", metavar="ORIGINAL", help="the original model's schematic (file or folder): print both "
                   "schedules' figures side by side")
    p.add_argument("--target", help="also replay the schedule(s) with this cost-model target's per-op costs "
                   "(docs/schedule.md): latency as QNN orders the ops, not the simulator's clock")
    p.set_defaults(func=run)


def _schematic(given: str) -> Path:
    from hexfuse.tools.optrace import find_schematics

    path = Path(given)
    if path.is_dir():
        found = find_schematics(path)
        if not found:
            raise HexfuseError(f"no *_schematic.bin in {path} (run the QNN EP with profiling_level=optrace there)")
        return max(found, key=lambda p: p.stat().st_size)
    if not path.is_file():
        raise HexfuseError(f"schematic {path} not found")
    return path


def _figures(schedule, target: str | None) -> dict[str, float]:
    """The happens-before counts of a schedule and, with a target, its replayed latency (us)."""
    from hexfuse.tools.optrace import fused_node_schedules, is_ordering_op

    graph = schedule.happens_before()
    figures: dict[str, float] = dict(graph.counts())
    fused = fused_node_schedules(schedule)
    if fused:  # (an original has none)
        figures["task_ops"] = sum(len(f.tasks) for f in fused)
        figures["task_ops_in_window"] = sum(f.in_window for f in fused)
    figures["ordering_ops"] = sum(1 for op in graph.ops if is_ordering_op(op.kernel))
    if target:
        from hexfuse.graph_passes.cost.replay import graph_of, op_costs, replay
        from hexfuse.graph_passes.cost.target import load_target

        loaded = load_target(target)
        figures["replay_us"] = round(replay(graph_of(graph, op_costs(graph, loaded)), loaded.hvx_contexts).latency_ns / 1e3, 2)
    return figures


def run(args: argparse.Namespace) -> int:
    from hexfuse.graph_passes.load.io import refuse_overwrite, same_file, write_files
    from hexfuse.tools.optrace import fused_node_schedules, png_bytes, read_schematic, summary_lines, trace_bytes

    source = _schematic(args.schematic)
    against = _schematic(args.against) if args.against else None
    read = [(source, "the schematic"), *([(against, "the --against schematic")] if against else [])]
    refuse_overwrite([Path(p) for p in (args.png, args.trace) if p], read)
    if args.png and args.trace and same_file(Path(args.png), Path(args.trace)):
        raise HexfuseError(f"--png and --trace name one file ({args.png})")
    schedule = read_schematic(source)
    fused = fused_node_schedules(schedule)
    if args.json:
        print(json.dumps([{"node": f.node, "overlapped": f.overlapped, "serial": f.serial, "in_window": f.in_window,
                           "matrix": [vars(s) for s in f.matrix], "tasks": [vars(s) for s in f.tasks]} for f in fused]))
    else:
        print("\n".join(summary_lines(schedule)))
    if (against or args.target) and schedule.main_list:
        columns = {"this": _figures(schedule, args.target)}
        if against:
            original = read_schematic(against)
            if not original.main_list:
                raise HexfuseError(f"--against {against}: the schematic holds no run lists (runlist2) to compare with")
            columns["original"] = _figures(original, args.target)
        names = list(columns)
        print("\n| figure | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
        for key in columns["this"]:
            print(f"| {key} | " + " | ".join(f"{columns[n].get(key, '')}" for n in names) + " |")
    files = ([(Path(args.png), png_bytes(schedule, [f.node for f in fused]))] if args.png else []) + \
        ([(Path(args.trace), trace_bytes(schedule))] if args.trace else [])
    write_files(files)  # both or neither
    for path, _ in files:
        print(f"hexfuse: wrote {path}", file=sys.stderr)
    return 0
