"""Predicted timelines of fused op types: Perfetto/Chrome trace JSON (always), PNG figure (on request).

Groups of one op type are identical up to renaming, so they share one prediction: one trace process
per op type, named with its fused-node count, its fused nodes listed in an ``instances`` event; one
track per lane and baseline:

    HexFuse_0_ab12cd x1600: t1 4.2 us, t4 3.1 us, gain 27%
      1 original serial                |d|==t7 matrix==|d|=t10=|
      3 fused serial/hmx               |  |==m0 m1 m2 m3==|
      3 fused serial/hvx:t7            |  |p r p r|         |=v0 v1=|
      4 fused concurrent/hmx           |  |m0 m1 m2 m3|
      4 fused concurrent/hvx:t10       |  |v0 v1 v2|
      4 fused concurrent/dma           |  |w0 w1|

Times are predictions of the cost model for one target, in microseconds (trace ``ts``/``dur`` unit);
open the JSON in ui.perfetto.dev. The JSON is written compact (no indent: the C encoder), the figure
only when asked for (matplotlib is the slowest part of a small run). Files are written atomically.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hexfuse.graph_passes.cost.baselines import Baselines
from hexfuse.graph_passes.cost.opcost import TaskCost
from hexfuse.graph_passes.cost.simulate import Schedule
from hexfuse.graph_passes.load.io import write_files
from hexfuse.graph_passes.spec.model import FusedOp

MAX_FIGURE_OPS = 8  # panels in the figure: the op types saving the most predicted time in total
MAX_TRACE_INSTANCES = 200  # fused-node names listed per op type in the trace
# One colour per task engine, the same in every panel (legend in the figure).
ENGINE_COLORS = {"matrix": "#4C72B0", "vector": "#DD8452", "dma": "#55A868"}


@dataclass(frozen=True)
class OpPrediction:
    op: FusedOp
    base: Baselines | None  # None: no feasible concurrent schedule
    costs: tuple[TaskCost, ...]
    instances: int  # fused nodes calling this op type

    @property
    def saved_ns(self) -> float:
        """Predicted time all fused nodes of this op type save (t1 - t4, times the instances)."""
        return 0.0 if self.base is None else self.instances * (self.base.t1_serial - self.base.t4_fused_concurrent)


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


def trace_json(predictions: Sequence[OpPrediction], target) -> dict:
    events: list[dict] = []
    for g, prediction in enumerate(predictions):
        op, base, pid = prediction.op, prediction.base, g + 1
        title = f"{op.op_type or f'op {g}'} x{prediction.instances}"
        instances = list(op.instances or (op.node_name,))
        events.append({"ph": "i", "s": "p", "pid": pid, "tid": 0, "name": "instances", "ts": 0,
                       "args": {"fused_nodes": instances[:MAX_TRACE_INSTANCES], "count": len(instances)}})
        if base is None:
            events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{title} (no prediction)"}})
            continue
        events.append({"ph": "M", "name": "process_name", "pid": pid,
                       "args": {"name": f"{title}: t1 {base.t1_serial / 1e3:.1f} us, t4 {base.t4_fused_concurrent / 1e3:.1f} us, "
                                        f"gain {base.gain:.0%}"}})
        events += _original_events(pid, 0, op, base, target.dispatch_ns, prediction.costs)
        more, tid = _schedule_events(pid, 1, "3 fused serial", base.serial, base.fused_overhead_ns)
        events += more
        more, _ = _schedule_events(pid, tid, "4 fused concurrent", base.concurrent, base.fused_overhead_ns)
        events += more
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "metadata": {"hexfuse_target": target.name, "note": "predicted by the hexfuse cost model, not measured"}}


def _draw(ax, schedule: Schedule, y0: float, engines: dict[str, str], offset: float) -> list[str]:
    lanes = sorted({slot.lane for slot in schedule.slots}, key=_lane_order)
    for i, lane in enumerate(lanes):
        for slot in (s for s in schedule.slots if s.lane == lane):
            color = ENGINE_COLORS.get(engines.get(slot.task_id, ""), "grey")
            ax.broken_barh([((offset + slot.start) / 1e3, (slot.end - slot.start) / 1e3)], (y0 + i, 0.8),
                           facecolors=color, edgecolor="white", linewidth=0.3)
    return lanes


def figure_png(predictions: Sequence[OpPrediction], target) -> bytes:
    """Per op type (the MAX_FIGURE_OPS saving the most in total), the concurrent (t4) and serial (t3)
    schedule of one fused node, slots coloured by the engine of the task they belong to."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ranked = sorted((p for p in predictions if p.base is not None), key=lambda p: -p.saved_ns)
    shown = ranked[:MAX_FIGURE_OPS]
    rows = max(1, len(shown))
    fig, axes = plt.subplots(rows, 1, figsize=(10, 1.6 + 1.6 * rows), squeeze=False)
    for ax, prediction in zip(axes[:, 0], shown):
        op, base = prediction.op, prediction.base
        engines = {t.id: t.engine for t in op.tasks}
        lanes = _draw(ax, base.concurrent, 0.0, engines, base.fused_overhead_ns)
        serial_lanes = _draw(ax, base.serial, len(lanes) + 0.5, engines, base.fused_overhead_ns)
        labels = [f"t4 concurrent: {lane}" for lane in lanes] + [f"t3 serial: {lane}" for lane in serial_lanes]
        ax.set_yticks([i + 0.4 for i in range(len(lanes))] + [len(lanes) + 0.9 + i for i in range(len(serial_lanes))])
        ax.set_yticklabels(labels, fontsize=7)
        ax.axvline(base.t2_best_existing / 1e3, color="black", linestyle="--", linewidth=0.8)
        ax.set_title(f"{op.op_type} x{prediction.instances}: t1 {base.t1_serial / 1e3:.1f}  t2 {base.t2_best_existing / 1e3:.1f}  "
                     f"t3 {base.t3_fused_serial / 1e3:.1f}  t4 {base.t4_fused_concurrent / 1e3:.1f} us per fused node; "
                     f"{prediction.saved_ns / 1e3:.1f} us saved in all", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    axes[-1, 0].set_xlabel(f"predicted time (us), target {target.name}", fontsize=8)
    if not shown:
        axes[0, 0].text(0.5, 0.5, "no fused groups with a prediction", ha="center", va="center")
    handles = [Patch(color=color, label=f"{engine} task") for engine, color in ENGINE_COLORS.items()]
    handles.append(Line2D([0], [0], color="black", linestyle="--", linewidth=0.8, label="t2 best existing (QNN today)"))
    # title on top, legend at the foot: each gets a band of its own so they never overlap
    band = 0.45 / fig.get_figheight()
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7, frameon=False)
    fig.suptitle(f"{len(shown)} of {len(predictions)} fused op types, largest total predicted saving first "
                 "(lanes: hmx matrix engine, hvx:<task> HVX contexts given to a task, dma)", fontsize=8, y=0.995)
    fig.tight_layout(rect=(0, band, 1, 1 - band))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def render_markdown(predictions: Sequence[OpPrediction], target) -> str:
    lines = [f"## Predicted timelines per op type (cost model, target `{target.name}`)", "",
             ("Per fused node of the op type: t1 original serial, t2 best existing (QNN DMA prefetch), t3 one entry "
              "serial, t4 one entry concurrent; times in us. Entry-merge gain = (t1-t3)/t1, overlap gain = (t3-t4)/t1; "
              "gain = 1 - t4/t2."), "",
             "| op type | fused nodes | tasks | t1 | t2 | t3 | t4 | entry merge | overlap | gain | quota (HVX ctx / VTCM MB / tiles) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for prediction in predictions:
        op, base = prediction.op, prediction.base
        tasks = ", ".join(f"{t.id} {t.engine}" for t in op.tasks)
        if base is None:
            lines.append(f"| `{op.op_type}` | {prediction.instances} | {tasks} | | | | | | | | no feasible schedule |")
            continue
        quota = "; ".join(f"{p.task_id}: {p.hvx_contexts}/{p.vtcm_bytes / 2**20:.1f}/{p.tiles}" for p in base.choice.plans)
        lines.append(
            f"| `{op.op_type}` | {prediction.instances} | {tasks} | {base.t1_serial / 1e3:.2f} | {base.t2_best_existing / 1e3:.2f} | "
            f"{base.t3_fused_serial / 1e3:.2f} | {base.t4_fused_concurrent / 1e3:.2f} | {base.entry_merge_gain:.1%} | "
            f"{base.overlap_gain:.1%} | {base.gain:.1%} | {quota} |")
    return "\n".join(lines) + "\n"


def report_files(predictions: Sequence[OpPrediction], target, out_prefix: Path,
                 plot: bool = False) -> list[tuple[Path, bytes]]:
    """``<prefix>.timeline.json`` always, ``<prefix>.timeline.png`` when ``plot``: (path, bytes) to write."""
    out_prefix = Path(out_prefix)
    trace = out_prefix.with_name(out_prefix.name + ".timeline.json")
    files = [(trace, (json.dumps(trace_json(predictions, target), separators=(",", ":")) + "\n").encode())]
    if plot:
        files.append((out_prefix.with_name(out_prefix.name + ".timeline.png"), figure_png(predictions, target)))
    return files


def write_reports(predictions: Sequence[OpPrediction], target, out_prefix: Path, plot: bool = False) -> list[Path]:
    """Write ``report_files``; returns what was written."""
    files = report_files(predictions, target, out_prefix, plot)
    write_files(files)
    return [path for path, _ in files]
