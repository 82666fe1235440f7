"""Predicted timelines of fused groups: Perfetto/Chrome trace JSON, PNG figure, Markdown table.

One trace process per fused group; one track per lane and baseline:

    HexFuse_0_ab12cd  (gain 27%)
      1 original serial   |d|==t7 matrix==|d|=t10=|
      3 fused serial/hmx  |  |==m0 m1 m2 m3==|
      3 fused serial/hvx  |  |p r p r|         |=v0 v1=|
      4 concurrent/hmx    |  |m0 m1 m2 m3|
      4 concurrent/hvx:.. |  |v0 v1 v2|
      4 concurrent/dma    |  |w0 w1|

Times are predictions of the cost model for one target, in microseconds (trace ``ts``/``dur`` unit);
open the JSON in ui.perfetto.dev.  Files are written atomically (temp file beside, then rename).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

from hexfuse.graph_passes.cost.baselines import Baselines
from hexfuse.graph_passes.cost.simulate import Schedule
from hexfuse.graph_passes.io import write_atomic
from hexfuse.graph_passes.spec import FusedOp

MAX_FIGURE_GROUPS = 8
_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860")


def _lane_order(lane: str) -> tuple[int, str]:
    return ({"hmx": 0, "dma": 2}.get(lane, 1), lane)


def _schedule_events(pid: int, tid0: int, label: str, schedule: Schedule, offset: float) -> tuple[list, int]:
    lanes = sorted({slot.lane for slot in schedule.slots}, key=_lane_order)
    tids = {lane: tid0 + i for i, lane in enumerate(lanes)}
    events = [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"{label}/{lane}"}}
              for lane, tid in tids.items()]
    events += [{"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}
               for tid in tids.values()]
    for slot in schedule.slots:
        events.append({
            "ph": "X", "pid": pid, "tid": tids[slot.lane], "name": f"{slot.task_id}.{slot.kind}[{slot.tile}]",
            "cat": slot.kind, "ts": round((offset + slot.start) / 1e3, 4), "dur": round((slot.end - slot.start) / 1e3, 4),
            "args": {"task": slot.task_id, "tile": slot.tile},
        })
    return events, tid0 + len(lanes)


def _original_events(pid: int, tid: int, op: FusedOp, base: Baselines, dispatch_ns: float, costs) -> list:
    events = [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "1 original serial"}},
              {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}]
    now = 0.0
    for task, cost, alone in zip(op.tasks, costs, base.alone_ns):
        for _ in range(cost.dispatches):
            events.append({"ph": "X", "pid": pid, "tid": tid, "name": "dispatch", "cat": "dispatch",
                           "ts": round(now / 1e3, 4), "dur": round(dispatch_ns / 1e3, 4)})
            now += dispatch_ns
        events.append({"ph": "X", "pid": pid, "tid": tid, "name": f"{task.id} {task.engine}", "cat": task.engine,
                       "ts": round(now / 1e3, 4), "dur": round(alone / 1e3, 4),
                       "args": {"nodes": [n.name for n in task.nodes][:8]}})
        now += alone
    return events


def trace_json(ops: Sequence[FusedOp], bases: Sequence[Baselines | None], costs: Sequence, target) -> dict:
    events: list[dict] = []
    for g, (op, base, cost) in enumerate(zip(ops, bases, costs)):
        pid = g + 1
        title = op.op_type or f"group {g}"
        if base is None:
            events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{title} (no prediction)"}})
            continue
        events.append({"ph": "M", "name": "process_name", "pid": pid,
                       "args": {"name": f"{title}  t1 {base.t1_serial / 1e3:.1f} us, t4 {base.t4_fused_concurrent / 1e3:.1f} us, "
                                        f"gain {base.gain:.0%}"}})
        events += _original_events(pid, 0, op, base, target.dispatch_ns, cost)
        more, tid = _schedule_events(pid, 1, "3 fused serial", base.serial, target.dispatch_ns)
        events += more
        more, _ = _schedule_events(pid, tid, "4 fused concurrent", base.concurrent, target.dispatch_ns)
        events += more
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "metadata": {"hexfuse_target": target.name, "note": "predicted by the hexfuse cost model, not measured"}}


def _draw(ax, schedule: Schedule, y0: float, colors: dict[str, str], offset: float) -> list[str]:
    lanes = sorted({slot.lane for slot in schedule.slots}, key=_lane_order)
    for i, lane in enumerate(lanes):
        for slot in (s for s in schedule.slots if s.lane == lane):
            ax.broken_barh([((offset + slot.start) / 1e3, (slot.end - slot.start) / 1e3)], (y0 + i, 0.8),
                           facecolors=colors.get(slot.task_id, "grey"), edgecolor="white", linewidth=0.3)
    return lanes


def figure_png(ops: Sequence[FusedOp], bases: Sequence[Baselines | None], target) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [(op, b) for op, b in zip(ops, bases) if b is not None][:MAX_FIGURE_GROUPS]
    fig, axes = plt.subplots(max(1, len(shown)), 1, figsize=(10, 1.0 + 1.6 * max(1, len(shown))), squeeze=False)
    for ax, (op, base) in zip(axes[:, 0], shown):
        colors = {t.id: _COLORS[i % len(_COLORS)] for i, t in enumerate(op.tasks)}
        lanes = _draw(ax, base.concurrent, 0.0, colors, target.dispatch_ns)
        serial_lanes = _draw(ax, base.serial, len(lanes) + 0.5, colors, target.dispatch_ns)
        labels = [f"4/{lane}" for lane in lanes] + [f"3/{lane}" for lane in serial_lanes]
        ax.set_yticks([i + 0.4 for i in range(len(lanes))] + [len(lanes) + 0.9 + i for i in range(len(serial_lanes))])
        ax.set_yticklabels(labels, fontsize=7)
        ax.axvline(base.t2_best_existing / 1e3, color="black", linestyle="--", linewidth=0.8)
        ax.set_title(f"{op.op_type}: t1 {base.t1_serial / 1e3:.1f}  t2 {base.t2_best_existing / 1e3:.1f}  "
                     f"t3 {base.t3_fused_serial / 1e3:.1f}  t4 {base.t4_fused_concurrent / 1e3:.1f} us "
                     f"(dashed: t2)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    axes[-1, 0].set_xlabel(f"predicted time (us), target {target.name}", fontsize=8)
    if not shown:
        axes[0, 0].text(0.5, 0.5, "no fused groups", ha="center", va="center")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def render_markdown(ops: Sequence[FusedOp], bases: Sequence[Baselines | None], target, verdicts=None) -> str:
    lines = [f"## Predicted timelines (cost model, target `{target.name}`)", "",
             ("t1 original serial, t2 best existing (QNN DMA prefetch), t3 one entry serial, t4 one entry "
              "concurrent; times in us. Entry-merge gain = (t1-t3)/t1, overlap gain = (t3-t4)/t1; "
              "gain = 1 - t4/t2."), "",
             "| fused op | tasks | t1 | t2 | t3 | t4 | entry merge | overlap | gain | quota (HVX ctx / VTCM MB / tiles) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for op, base in zip(ops, bases):
        tasks = ", ".join(f"{t.id} {t.engine}" for t in op.tasks)
        if base is None:
            lines.append(f"| `{op.op_type}` | {tasks} | | | | | | | | no feasible schedule |")
            continue
        quota = "; ".join(f"{p.task_id}: {p.hvx_contexts}/{p.vtcm_bytes / 2**20:.1f}/{p.tiles}" for p in base.choice.plans)
        lines.append(
            f"| `{op.op_type}` | {tasks} | {base.t1_serial / 1e3:.2f} | {base.t2_best_existing / 1e3:.2f} | "
            f"{base.t3_fused_serial / 1e3:.2f} | {base.t4_fused_concurrent / 1e3:.2f} | {base.entry_merge_gain:.1%} | "
            f"{base.overlap_gain:.1%} | {base.gain:.1%} | {quota} |")
    return "\n".join(lines) + "\n"


def write_reports(ops: Sequence[FusedOp], bases: Sequence[Baselines | None], costs: Sequence, target,
                  out_prefix: Path) -> list[Path]:
    out_prefix = Path(out_prefix)
    trace = out_prefix.with_name(out_prefix.name + ".timeline.json")
    png = out_prefix.with_name(out_prefix.name + ".timeline.png")
    write_atomic(trace, (json.dumps(trace_json(ops, bases, costs, target), indent=0) + "\n").encode())
    write_atomic(png, figure_png(ops, bases, target))
    return [trace, png]
