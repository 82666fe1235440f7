"""Does QNN itself overlap one head group's softmax with another group's attention matmuls? (issue 24)

Reads QNN's schedule of a realsize layer (unsplit, or built with ``:gN`` head groups) and its replay:
per head group, the softmax's QNN ops (HVX), how many of them are unordered with some HMX op of another
group's QK^T / PV in the happens-before graph, and how much of their replayed time actually runs while
such an HMX op runs. For the unsplit layer the one softmax is measured against the one QK^T / PV (QNN
slices both; a slice of the softmax may run beside a slice of QK^T). What this shows belongs to the
split, not to a fused node: the graph is only cut into independent chains, nothing is fused.

    python -m hexfuse.tools.realsize_heads llama-3.2-1b:prefill:1024:attn llama-3.2-1b:prefill:1024:attn:g4 \\
        --targets sm8650 sm8750
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.realsize import Layer, build, parse_layer


@dataclass
class GroupOverlap:
    group: int
    softmax_ops: int
    unordered: int  # softmax ops unordered with some HMX op of another group's QK^T / PV (or, unsplit, its own)
    softmax_us: float  # the softmax ops' replayed time (on their HVX threads)
    hidden_us: float  # the part of it that runs while such an HMX op runs


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _covered(spans: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """Length of the union of ``spans`` that lies inside the union of ``cover``."""
    total = 0.0
    for a, b in _union(spans):
        for c, d in cover:
            total += max(0.0, min(b, d) - max(a, c))
    return total


def head_groups(layer: Layer) -> list[str]:
    """Node-name suffixes of the attention chains of layer 0: [''] unsplit, ['_g0', '_g1', ...] split."""
    return [""] if layer.head_groups == 1 else [f"_g{g}" for g in range(layer.head_groups)]


def cross_group_overlap(schedule, replayed, groups: list[str]) -> list[GroupOverlap]:
    """Per group: its softmax against the HMX ops of the other groups' QK^T and PV (unsplit: its own)."""
    ops = schedule.ops
    hmx = {g: [i for i in schedule.of_nodes({f"qk{g}_node", f"pv{g}_node"}) if ops[i].resource == "hmx"] for g in groups}
    out = []
    for k, g in enumerate(groups):
        softmax = [i for i in schedule.of_nodes({f"probs{g}_node"}) if ops[i].resource != "dma"]
        others = [i for h in groups if h != g or len(groups) == 1 for i in hmx[h]]
        cover = _union([(replayed.starts[i], replayed.ends[i]) for i in others])
        spans = [(replayed.starts[i], replayed.ends[i]) for i in softmax]
        out.append(GroupOverlap(k, len(softmax), sum(1 for s in softmax if any(not schedule.ordered(s, m) for m in others)),
                                sum(b - a for a, b in spans) / 1e3, _covered(spans, cover) / 1e3))
    return out


def cross_head_pairs(layer: Layer):
    """For the bench: analysis -> (QK^T of group h, the task holding group g's softmax) for every g != h
    the pass proves independent. Its own partner search (candidates.py: the 4 nearest partners within 64
    units of the level order) pairs each QK^T with the K/V expands next to it and never reaches these."""
    groups = head_groups(layer)

    def pairs(analysis) -> list[tuple]:
        from hexfuse.graph_passes.analysis.candidates import independence_problem

        owner = {analysis.flat.node(i).name: task for task in analysis.tasks if task.fusable
                 for i in analysis.task_nodes(task)}
        out = []
        for g in groups:
            softmax = owner.get(f"probs{g}_node")
            for h in groups:
                qk = owner.get(f"qk{h}_node")
                if h == g or softmax is None or qk is None or softmax.engine == qk.engine:
                    continue
                if independence_problem(analysis, qk, softmax) is None:
                    out.append(tuple(sorted((qk, softmax), key=lambda t: t.lo)))
        return out

    return pairs


def measure(layer: Layer, target: str) -> tuple[float, list[GroupOverlap]]:
    """(t2 us, per-group overlap) from the cached engine map (``hexfuse engines`` or the bench makes it)."""
    from hexfuse.graph_passes.cost.schedule_verdict import ScheduleJudge
    from hexfuse.graph_passes.cost.target import load_target
    from hexfuse.tools.bench.bench_realsize import cached_schedule

    schedule = cached_schedule(build(layer), layer.stem, target)
    judge = ScheduleJudge(schedule, load_target(target), 0.1)
    return judge.original.latency_ns / 1e3, cross_group_overlap(schedule, judge.original, head_groups(layer))


def render(rows: list[tuple[str, str, float, list[GroupOverlap]]]) -> str:
    lines = ["| model | target | t2 us | softmax ops | unordered with another group's HMX | softmax us (replayed) | "
             "of it beside that HMX us (%) |", "|---|---|---|---|---|---|---|"]
    for stem, target, t2, groups in rows:
        n, u = sum(g.softmax_ops for g in groups), sum(g.unordered for g in groups)
        sm, hid = sum(g.softmax_us for g in groups), sum(g.hidden_us for g in groups)
        lines.append(f"| {stem} | {target} | {t2:.1f} | {n} | {u} | {sm:.1f} | {hid:.1f} ({100 * hid / sm if sm else 0:.0f}%) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hexfuse.tools.realsize_heads", description=__doc__.split("\n\n")[0])
    ap.add_argument("layers", nargs="+", help="CONFIG:MODE:SIZE[:PRECISION][:attn][:gN] (one layer each)")
    ap.add_argument("--targets", nargs="+", default=["sm8650"])
    args = ap.parse_args(argv)
    try:
        rows = []
        for text in args.layers:
            layer = parse_layer(text)
            if not isinstance(layer, Layer):
                raise HexfuseError(f"realsize_heads: one layer per argument, got {text!r}")
            for target in args.targets:
                rows.append((layer.stem, target, *measure(layer, target)))
    except HexfuseError as exc:
        print(f"hexfuse: error: {exc}", file=sys.stderr)
        return 1
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
