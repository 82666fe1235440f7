"""What a report says per fused group about engines and gain: what runs where and how, which source
decided, and how the predicted gain splits into entry merge and overlap, with the part that rests on
the estimated per-op constants.

    matrix task   QNN's own ops, on HMX or HVX (the engine map, else the rules)
    vector task   one package task op on the HVX run list (launch/wait, its own HVX thread) on HTP;
                  "move on HVX" where it only moves data; what QNN runs for its nodes today
    gain          t2 - t4 = entry merge (t1 - t3) + overlap (t3 - t4) - QNN's own prefetch (t1 - t2);
                  dispatch_ns x ops saved + hvx_launch_ns x HVX launches saved is the estimated part
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.analysis.tasks import Task
from hexfuse.graph_passes.engines.classify import OPTRACE, RULES, Engine

MAX_NODES = 6  # nodes described per task in the Markdown (the JSON has all)


def _decided_by(sources: list[str]) -> str:
    mapped = sum(source == OPTRACE for source in sources)
    if mapped == len(sources):
        return OPTRACE
    if mapped == 0:
        return RULES
    return f"{OPTRACE} ({mapped} of {len(sources)} nodes), {RULES} (the rest)"


def task_engines(analysis: Analysis, task: Task) -> dict[str, Any]:
    """How the task runs in the fused op, where QNN runs its nodes today, and what decided that."""
    units = analysis.units
    cores = [units.core[u] for u in task.units if units.engine[u] is not Engine.FREE] or [units.core[task.units[0]]]
    decisions = [(analysis.label(i), analysis.decision(i)) for i in cores]
    today = [{"node": label, "resource": d.resource, "decided_by": d.source, "note": d.note} for label, d in decisions]
    moves = all(d.moves for _, d in decisions)
    if task.engine is Engine.MATRIX:
        where = Counter(d.resource for _, d in decisions if d.resource not in ("none", "")).most_common(1)
        runs_on = where[0][0] if where else "hmx"
        how = f"QNN's own ops on {runs_on.upper()} (the fused op's rules hand the matrix work to QNN)"
    elif analysis.htp:
        runs_on = "hvx"
        how = ("one package task op on the HVX run list (launch/wait on its own HVX thread)"
               + ("; move on HVX" if moves else ""))
    else:
        runs_on = {"vector": "hvx", "dma": "dma"}.get(task.engine.value, task.engine.value)
        how = f"the host executor's {task.engine.value} lane"
    return {"runs_on": runs_on, "how": how, "moves_only": moves, "decided_by": _decided_by([d.source for _, d in decisions]),
            "qnn_today": today}


def gain_split(details: dict[str, float]) -> dict[str, Any] | None:
    """The predicted saving against the best existing execution, split, with its estimated part (us)."""
    keys = ("t1_serial", "t2_best_existing", "t3_fused_serial", "t4_fused_concurrent", "saved_by_dispatch_ns")
    if not all(k in details for k in keys):
        return None
    t1, t2, t3, t4 = (details[k] for k in keys[:4])
    saved = t2 - t4
    constants = details["saved_by_dispatch_ns"] + details["saved_by_hvx_launch_ns"]

    def us(ns: float) -> float:
        return round(ns / 1e3, 3)

    return {
        "saved_us": us(saved), "entry_merge_us": us(t1 - t3), "overlap_us": us(t3 - t4), "qnn_prefetch_us": us(t1 - t2),
        "dispatch_ns": details["dispatch_ns"], "hvx_launch_ns": details["hvx_launch_ns"],
        "ops": [int(details["ops_serial"]), int(details["ops_fused"])],
        "hvx_launches": [int(details["hvx_launches_serial"]), int(details["hvx_launches_fused"])],
        "from_dispatch_us": us(details["saved_by_dispatch_ns"]), "from_hvx_launch_us": us(details["saved_by_hvx_launch_ns"]),
        "estimated_share": round(constants / saved, 4) if saved > 0 else None,
        "entry_merge_estimated_share": round(constants / (t1 - t3), 4) if t1 - t3 > 0 else None,
    }


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def group_lines(group: dict[str, Any]) -> list[str]:
    """Markdown lines of one fused group (report.report_data's group entry)."""
    lines = [f"- `{group['fused_node']}` ({group['source']}, gain {group['gain']:.1%} vs best existing)"]
    for task in group["tasks"]:
        engines = task["engines"]
        names = ", ".join(f"`{n}`" for n in task["compute_ops"][:MAX_NODES])
        more = f", … +{len(task['compute_ops']) - MAX_NODES}" if len(task["compute_ops"]) > MAX_NODES else ""
        today = "; ".join(f"{t['node']}: {t['note'] or t['resource']}" for t in engines["qnn_today"][:MAX_NODES])
        lines.append(f"  - {task['engine']} task {names}{more}: {engines['how']}. Decided by: {engines['decided_by']}. "
                     f"QNN today: {today}")
    split = group.get("gain_split")
    if split is not None:
        lines.append(
            f"  - saves {split['saved_us']:.2f} us = entry merge {split['entry_merge_us']:.2f} + overlap "
            f"{split['overlap_us']:.2f} - QNN's own prefetch {split['qnn_prefetch_us']:.2f}; of it "
            f"{split['from_dispatch_us']:.2f} us is dispatch_ns {split['dispatch_ns']:g} x {split['ops'][0] - split['ops'][1]} "
            f"ops saved ({split['ops'][0]} -> {split['ops'][1]}) and {split['from_hvx_launch_us']:.2f} us hvx_launch_ns "
            f"{split['hvx_launch_ns']:g} x {split['hvx_launches'][0] - split['hvx_launches'][1]} HVX launches saved: "
            f"{_share(split['estimated_share'])} of the saving rests on these estimates")
    return lines
