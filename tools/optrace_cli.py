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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hexfuse.tools.optrace import find_schematics, fused_node_schedules, read_schematic, summary_lines, write_png, write_trace

    path = Path(args.schematic)
    if path.is_dir():
        found = find_schematics(path)
        if not found:
            raise HexfuseError(f"no *_schematic.bin in {path} (run the QNN EP with profiling_level=optrace there)")
        path = max(found, key=lambda p: p.stat().st_size)
    elif not path.is_file():
        raise HexfuseError(f"schematic {path} not found")
    schedule = read_schematic(path)
    fused = fused_node_schedules(schedule)
    if args.json:
        print(json.dumps([{"node": f.node, "overlapped": f.overlapped, "serial": f.serial, "in_window": f.in_window,
                           "matrix": [vars(s) for s in f.matrix], "tasks": [vars(s) for s in f.tasks]} for f in fused]))
    else:
        print("\n".join(summary_lines(schedule)))
    if args.png:
        write_png(schedule, Path(args.png), [f.node for f in fused])
        print(f"hexfuse: wrote {args.png}", file=sys.stderr)
    if args.trace:
        write_trace(schedule, Path(args.trace))
        print(f"hexfuse: wrote {args.trace}", file=sys.stderr)
    return 0
