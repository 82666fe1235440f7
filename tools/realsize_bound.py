"""What bounds a realsize layer in the replay of QNN's schedule: the main thread, the HVX threads, HMX
or DMA/DDR (issue 24 item 3: is decode against a long KV cache DMA-bound, and what could be hidden?).

Per model and target, from the cached engine map (the bench makes it): t2, the main thread's busy time
(its HMX ops apart), the HVX threads' busy time per thread (and the part that is the per-op constant
qnn_hvx_op_ns), the DMA engine's transfer time, and the DDR floor (every byte the schedule moves
from DDR at the target's DDR rate). The replay does not model DDR contention between threads, so where
that floor exceeds t2 the replay is optimistic and the layer is DDR-bound. Nothing is fused; replay costs
as in graph_passes/cost/replay.py.

    python -m hexfuse.tools.realsize_bound llama-3.2-1b:decode:2048 llama-3.2-1b:decode:4096 --targets sm8650 sm8750
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from hexfuse.graph_passes.errors import HexfuseError


@dataclass
class Bound:
    t2_us: float
    main_us: float  # main thread busy, HMX ops included
    hmx_us: float  # of which HMX ops
    hvx_per_thread_us: float  # HVX busy / threads
    hvx_constant_share: float  # part of the HVX busy time that is qnn_hvx_op_ns
    dma_us: float  # the DMA engine's transfers
    ddr_floor_us: float  # all DDR bytes of the schedule at the DDR rate

    @property
    def bound_by(self) -> str:
        lanes = {"main thread": self.main_us, "HVX": self.hvx_per_thread_us, "DMA": self.dma_us, "DDR": self.ddr_floor_us}
        return max(lanes, key=lanes.get)


def bound_of(schedule, target) -> Bound:
    from hexfuse.graph_passes.cost.schedule_verdict import ScheduleJudge

    judge = ScheduleJudge(schedule, target, 0.1)
    ops, run, over = schedule.ops, judge.costs.run, judge.costs.overhead
    vec = [i for i in schedule.vec]
    hvx = sum(run[i] for i in vec)
    return Bound(judge.original.latency_ns / 1e3, sum(run[i] for i in schedule.main) / 1e3,
                 sum(run[i] for i in schedule.main if ops[i].resource == "hmx") / 1e3,
                 hvx / target.hvx_contexts / 1e3, sum(over[i] for i in vec) / hvx if hvx else 0.0,
                 sum(judge.costs.transfer) / 1e3, sum(op.ddr_bytes for op in ops) / target.ddr_bytes_per_ns / 1e3)


def render(rows: list[tuple[str, str, Bound]]) -> str:
    lines = ["| model | target | t2 us | main thread us (HMX) | HVX per thread us (per-op constant) | DMA us | "
             "all DDR bytes at the DDR rate us | bound by |", "|---|---|---|---|---|---|---|---|"]
    for stem, target, b in rows:
        lines.append(f"| {stem} | {target} | {b.t2_us:.1f} | {b.main_us:.1f} ({b.hmx_us:.1f}) | {b.hvx_per_thread_us:.1f} "
                     f"({100 * b.hvx_constant_share:.0f}%) | {b.dma_us:.1f} | {b.ddr_floor_us:.1f} | {b.bound_by} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from hexfuse.graph_passes.cost.target import load_target
    from hexfuse.tools.bench.bench_realsize import build_source, cached_schedule, engines_of, parse_source

    ap = argparse.ArgumentParser(prog="python -m hexfuse.tools.realsize_bound", description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="as bench_realsize takes them")
    ap.add_argument("--targets", nargs="+", default=["sm8650"])
    args = ap.parse_args(argv)
    rows = []
    try:
        for text in args.models:
            source = parse_source(text)
            path = build_source(source)
            for target in args.targets:
                schedule = cached_schedule(path, source.stem, target, engines_of(source, target))
                rows.append((source.stem, target, bound_of(schedule, load_target(target))))
    except HexfuseError as exc:
        print(f"hexfuse: error: {exc}", file=sys.stderr)
        return 1
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
