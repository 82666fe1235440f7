"""What ``hexfuse analyze`` prints and the ``.hexfuse.md`` report of ``hexfuse fuse`` says, as data.

``report_data`` gathers everything once (``analyze --json`` prints it as is); ``render_report`` turns
the same dict into Markdown, so the two never say different things. Nodes are named so that a user
finds them in their own file (labels.py): the node's name, or ``#<index> <OpType>`` in the file's
node list where the file leaves it unnamed; a task is named by its units' compute ops (a QDQ unit by
its Conv or MatMul, not by the DequantizeLinear of its bias).
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from typing import Any

from hexfuse.graph_passes.analysis.sources import Sources
from hexfuse.graph_passes.analysis.tasks import Task
from hexfuse.graph_passes.load.model import pin_arguments, symbolic_dims
from hexfuse.graph_passes.pipeline import AnalyzeResult
from hexfuse.graph_passes.report.engines import gain_split, group_lines, task_engines
from hexfuse.graph_passes.select.balance import Scorer

MAX_KINDS = 40  # reason kinds the Markdown lists; past it one row says how many more and where they are
MAX_EXAMPLE_TASKS = 3  # tasks named per reason kind in the Markdown (the JSON names them all)
MAX_TASK_NODES = 6  # compute ops named per task in the Markdown (the JSON names all)
_US = 1e3
# How reasons name nodes (labels.py): OpType 'name' (a repr: either quote), #12 OpType, and "(copy)".
_NAMED = re.compile(r"""\b(?P<op>[A-Z][\w.]*) (?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")(?: \(copy\))?""")
_INDEXED = re.compile(r"#\d+ (?P<op>[A-Z][\w.]*)(?: \(copy\))?")
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_NODE_OF = re.compile(r"node (?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\") \((?P<op>[A-Z][\w.]*)\)")  # node 'n1' (Dropout)
_NUMBER = re.compile(r"[-+]?\d[\d.,]*")
_NO_TRANSLATION = re.compile(r"(?P<op>[A-Z]\w*) has no QNN translation")  # in a reason kind (names out)
_SCORER = re.compile(r"^best partner rejected by \S+ scorer: ")


def reason_kind(reason: str) -> str:
    """The reason with what names one node or one figure taken out, so that tasks refused for the same
    cause count together (a Relu without a QNN translation is one kind, whichever Relu)."""
    if " reaches " in reason:
        return "depends on every nearby task of another engine (a path links them)"
    if "too far in the schedule" in reason:
        return "nearest task of another engine is beyond the reachability window"
    if "hazard" in reason:
        return "buffer hazard (RAW/WAR/WAW through views)"
    scorer = _SCORER.match(reason)
    if scorer:  # the scorer's verdict up to its first figure: "package: holding the group together adds"
        why = reason[scorer.end():]
        head = _NUMBER.split(why, maxsplit=1)[0].rstrip(" (:;,")
        return f"partner rejected by the scorer (not worth fusing): {head or why}"
    kind = _NODE_OF.sub(lambda m: f"a {m['op']} node", reason)
    kind = _INDEXED.sub(lambda m: m["op"], _NAMED.sub(lambda m: m["op"], kind))
    return _QUOTED.sub("'…'", kind)


def _not_fused(analysis, reasons: dict[int, str], every_task: bool) -> dict[str, Any]:
    """Reasons grouped by kind, most tasks first, each with its tasks (every one in the JSON)."""
    tasks_of: dict[str, list[int]] = {}
    for task_id in sorted(reasons):
        tasks_of.setdefault(reason_kind(reasons[task_id]), []).append(task_id)
    by_kind = []
    for kind, ids in sorted(tasks_of.items(), key=lambda item: (-len(item[1]), item[0])):
        first = ids[0]
        by_kind.append({"kind": kind, "tasks": len(ids),
                        "example": f"{analysis.task_label(analysis.tasks[first])}: {reasons[first]}",
                        "task_labels": [analysis.task_label(analysis.tasks[t]) for t in ids]})
    return {"by_kind": by_kind, "total": len(reasons),
            "tasks": [{"task": analysis.task_label(analysis.tasks[t]), "reason": reasons[t]} for t in sorted(reasons)]
            if every_task else None}


def _untranslated_folds(folds: list[str], reasons: dict[int, str]) -> list[str]:
    """Epilogue op types the target folds into matrix ops whose matrix tasks were refused on HTP because
    hexfuse has no QNN translation for them (their reasons say so)."""
    found = {m["op"] for reason in reasons.values() for m in _NO_TRANSLATION.finditer(reason_kind(reason))}
    return sorted(found & set(folds))


def _task_entry(result: AnalyzeResult, task: Task) -> dict[str, Any]:
    analysis = result.analysis
    units, ops = analysis.units, analysis.flat.op_types
    folded = [analysis.label(i) for u in task.units for i in units.nodes[u]
              if i != units.core[u] and ops[i] in analysis.folds]  # epilogues folded into the unit's matrix op
    return {"engine": task.engine.value, "units": len(task.units), "nodes": len(analysis.task_nodes(task)),
            "compute_ops": [analysis.label(units.core[u]) for u in task.units if units.engine[u].value != "free"]
            or [analysis.label(units.core[task.units[0]])], "folded": folded, "engines": task_engines(analysis, task)}


def _times(details: dict[str, float]) -> dict[str, float | None]:
    def us(key: str) -> float | None:
        return round(details[key] / _US, 3) if key in details else None

    return {"t1_us": us("t1_serial"), "t2_us": us("t2_best_existing"), "t3_us": us("t3_fused_serial"),
            "t4_us": us("t4_fused_concurrent"), "entry_merge_gain": details.get("entry_merge_gain"),
            "overlap_gain": details.get("overlap_gain")}


def _quota(details: dict[str, float], tasks: int) -> list[dict[str, float]] | None:
    if "quota.task0.hvx_contexts" not in details:
        return None
    return [{"hvx_contexts": int(details[f"quota.task{i}.hvx_contexts"]), "vtcm_mb": details[f"quota.task{i}.vtcm_mb"],
             "tiles": int(details[f"quota.task{i}.tiles"])} for i in range(tasks)]


def report_data(result: AnalyzeResult, scorer: Scorer, title: str, summary=None, verification=None,
                every_task: bool = True) -> dict[str, Any]:
    """Everything the report says. ``summary``: cost.summary.ModelSummary (None for scorers without a
    cost model); ``verification``: verify.Verification of a written fused model; ``every_task``: also
    list every unfused task with its reason (the Markdown shows reason kinds with one example each)."""
    analysis, loaded, labels = result.analysis, result.loaded, result.labels
    target = getattr(scorer, "target", None)
    file_nodes = labels.file_nodes if labels is not None else len(loaded.model.graph.node)
    copies = len(labels.copies) if labels is not None else 0
    fusable = [task for task in analysis.tasks if task.fusable]
    model = {
        "file": loaded.path.name, "sha256": loaded.sha256, "nodes_in_file": file_nodes,
        "nodes_analysed": analysis.flat.node_count, "opset_upgraded_from": loaded.upgraded_from,
        "nodes_added_by_upgrade": sum(1 for i in (loaded.origin or ()) if i < 0), "dequantize_copies": copies,
        "symbolic_dims": symbolic_dims(loaded.model.graph), "fixed_dims": dict(loaded.fixed_dims),
        "pin_arguments": pin_arguments(loaded.model.graph),
    }
    first_group: dict[int, object] = {}
    for node in result.fused_nodes:
        first_group.setdefault(node.op, node.group)
    op_types = []
    for op_index, op in enumerate(result.fused_ops):
        group = first_group[op_index]
        op_types.append({"op_type": op.op_type, "fused_nodes": len(op.instances), "engines": [t.engine for t in op.tasks],
                         "gain": round(group.verdict.gain, 6), **_times(group.verdict.details),
                         "quota": _quota(group.verdict.details, len(op.tasks))})
    groups = []
    sources = Sources(result.prepared, analysis) if result.fused_nodes else None
    for node in result.fused_nodes:
        verdict = node.group.verdict
        groups.append({"fused_node": node.node_name, "op_type": result.fused_ops[node.op].op_type,
                       "source": sources.describe(node.group.tasks),
                       "tasks": [_task_entry(result, task) for task in node.group.tasks],
                       "gain": round(verdict.gain, 6), "reason": verdict.reason, **_times(verdict.details),
                       "gain_split": gain_split(verdict.details)})
    reasons = result.selection.reasons
    return {
        "title": title, "model": model,
        "target": target.name if target is not None else scorer.name,
        "min_gain": getattr(scorer, "min_gain", None), "min_overlap": getattr(scorer, "min_overlap", None),
        "folds": sorted(analysis.folds),
        "folds_without_qnn_translation": _untranslated_folds(sorted(analysis.folds), reasons),
        "engine_map": _engine_map(analysis, scorer),
        "allow_merge_only": getattr(scorer, "allow_merge_only", None), "as_designed": _as_designed(scorer),
        "units_by_engine": analysis.engine_histogram(),
        "tasks": {"fusable": len(fusable), "total": len(analysis.tasks),
                  "fused": sum(len(node.group.tasks) for node in result.fused_nodes)},
        "already_fused": result.already_fused,
        "summary": summary.as_dict() if summary is not None else None,
        "verification": verification.as_dict() if verification is not None else None,
        "op_types": op_types, "groups": groups,
        "not_fused": _not_fused(analysis, reasons, every_task),
    }


def _as_designed(scorer: Scorer) -> bool | None:
    """How the cost model priced a fused node (None: a scorer without one); where QNN's schedule decides,
    its replay prices the package as built whatever --as-designed says."""
    designed = getattr(scorer, "as_designed", None)
    return designed and not getattr(scorer, "per_instance", False) if designed is not None else None


def _engine_map(analysis, scorer: Scorer) -> dict[str, Any]:
    """Which source decided the engines: the engine map (how many compute nodes it covers) or the rules."""
    units = analysis.units
    cores = [units.core[u] for u in range(len(units)) if units.engine[u].value in ("matrix", "vector", "dma")]
    decided = Counter(analysis.decision(i).source for i in cores)
    found = analysis.engine_map
    return {"note": getattr(scorer, "engines_note", "") or ("engine map given" if found else "no engine map: op-type rules"),
            "file": found.path if found is not None else None, "htp": analysis.htp,
            "decided_by": dict(sorted(decided.items()))}


def _cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def dynamic_dims_note(dims: dict[str, list[str]], pins: list[str] | None = None) -> str:
    """One line naming the symbolic dims and where they sit, and how to pin them: ``pins`` are the
    ``--fix-dim`` arguments for the graph's inputs (load.model.pin_arguments; the outputs follow)."""
    named = "; ".join(f"`{name}` ({', '.join(where[:4])}{', ...' if len(where) > 4 else ''})" for name, where in dims.items())
    if pins is None:  # (a caller without the graph: every named dim)
        pins = [f"{name}=VALUE" for name in dims if name != "?"]
    if not pins:
        return f"symbolic dims {named}, on outputs only: the inputs are static, so shape inference sizes the rest"
    how = ("pin the inputs' with `" + " ".join(f"--fix-dim {shlex.quote(pin)}" for pin in pins) + "` (the outputs "
           "follow by shape inference; an unnamed dim is pinned by its place, INPUT[AXIS]=VALUE)")
    return (f"symbolic dims {named}: units with dynamic shapes are neither priced nor fused (the QNN EP needs "
            f"static shapes too); {how}")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _header(data: dict[str, Any]) -> list[str]:
    model = data["model"]
    lines = [f"# hexfuse: {data['title']}", "",
             f"- model: `{model['file']}` (sha256 `{model['sha256'][:16]}…`), {model['nodes_in_file']} nodes in the file"]
    if model["opset_upgraded_from"] is not None:
        lines.append(f"- opset upgraded from {model['opset_upgraded_from']} for analysis: the upgrade added "
                     f"{model['nodes_added_by_upgrade']} nodes (named \"added by the opset upgrade\" below)")
    if model["dequantize_copies"]:
        lines.append(f"- {model['dequantize_copies']} DequantizeLinear copies made so that each feeds one node "
                     "(named \"(copy)\" below)")
    if model.get("fixed_dims"):
        lines.append("- symbolic dims pinned (--fix-dim): " + ", ".join(f"`{k}`={v}" for k, v in model["fixed_dims"].items()))
    if model.get("symbolic_dims"):
        lines.append(f"- dynamic shapes: {dynamic_dims_note(model['symbolic_dims'], model.get('pin_arguments'))}")
    histogram = ", ".join(f"{engine} {count}" for engine, count in data["units_by_engine"].items() if count)
    lines.append(f"- units by engine: {histogram}")
    tasks = data["tasks"]
    refused = data["not_fused"]["total"]
    lines.append(f"- tasks: {tasks['total']}, of which {tasks['fusable']} hold matrix, vector or DMA work a group could "
                 f"pair; fused: {tasks.get('fused', 0)}" + (f"; not fused: {refused} (why: Not fused, below)" if refused else ""))
    folds = f"- target: `{data['target']}`; epilogues it folds into the matrix op before them (QNN runs them inside it): " \
        + (", ".join(data["folds"]) or "none")
    untranslated = data.get("folds_without_qnn_translation") or []
    if untranslated:
        folds += (f"; hexfuse cannot yet hand a matrix op with a folded {', '.join(untranslated)} to QNN (no QNN "
                  "translation), so on HTP those matrix tasks are not fused")
    lines.append(folds + (" (alone, not after a matrix op, each is vector work)" if data["folds"] else ""))
    engines = data["engine_map"]
    lines.append(f"- engines: {engines['note']}; compute units decided by " + (", ".join(
        f"{source} {count}" for source, count in engines["decided_by"].items()) or "-")
        + ("; non-matrix tasks run as HVX task ops (QNN HTP)" if engines["htp"] else ""))
    if data.get("as_designed") is not None:  # the cost model's scorer: how it priced a fused node
        lines.append("- fused nodes priced as designed (--as-designed: one entry, task tensors resident in VTCM), "
                     "not as the generated package builds them" if data["as_designed"] else
                     "- fused nodes priced as the generated package builds them (entry and joins with their ports "
                     "in main memory, QNN's copies for them; --as-designed prices the design's)")
    lines.append(f"- fused groups: {len(data['groups'])}, calling {len(data['op_types'])} op types "
                 "(identical groups share one function and one kernel)")
    if data["already_fused"]:
        lines.append("- the model already holds hexfuse fused nodes: nothing more is done")
    return lines + [""]


def _which_figure(summary: dict[str, Any]) -> list[str]:
    """Where the engine map holds QNN's schedule, the report has two times for the original: say which decides."""
    schedule = summary.get("schedule")
    if not schedule:
        return []
    return [f"Two times for the original model: {summary['serial_us']:.2f} us adds the target's estimated per-op "
            f"costs one op after another (the table; its percentages are of this figure), and "
            f"{schedule['replay_us']:.2f} us replays QNN's own schedule from the engine map, with its overlap (below). "
            "Believe the replay: it is the closer to the device, and it decides what fuses on HTP.", ""]


def _summary(summary: dict[str, Any]) -> list[str]:
    return [
        f"## Predicted latency of the whole model (cost model, target `{summary['target']}`)", "",
        *_which_figure(summary),
        "| | us | of serial |", "|---|---|---|",
        f"| serial: every op its own QNN op, one after another | {summary['serial_us']:.2f} | 100.0% |",
        f"| saved by entry merging (fewer ops: each non-matrix task becomes one task op) | {summary['entry_merge_us']:.2f} | {summary['entry_merge_gain']:.1%} |",
        f"| saved by engine overlap (tasks on their engines at once) | {summary['overlap_us']:.2f} | {summary['overlap_gain']:.1%} |",
        f"| fused | {summary['fused_us']:.2f} | {1 - summary['total_gain']:.1%} |", "",
        f"Total gain {summary['total_gain']:.1%} = entry merge {summary['entry_merge_gain']:.1%} + overlap "
        f"{summary['overlap_gain']:.1%} of the serial time. Priced: {summary['priced_tasks']} tasks; not priced: "
        f"{summary['unpriced_units']} units (opaque ops, dynamic shapes, ops without a kernel).", "",
        *_replayed(summary.get("schedule"))]


def _replayed(schedule: dict[str, Any] | None) -> list[str]:
    if not schedule:
        return []
    return [
        "### QNN's own schedule, replayed (decides on HTP)", "",
        f"The engine map holds QNN's schedule of the original ({schedule['qnn_ops']} QNN ops: {schedule['hmx_ops']} on HMX, "
        f"{schedule['hvx_ops']} on the HVX run list). Replayed with the target's per-op costs on one main thread and "
        f"{schedule['hvx_threads']} HVX threads it takes {schedule['replay_us']:.2f} us (main thread busy "
        f"{schedule['main_busy_us']:.2f} us, HVX {schedule['hvx_busy_us']:.2f} us); QNN already lets "
        f"{schedule['hvx_beside_hmx']} of its HVX ops run beside an HMX op. {schedule['estimated_share']:.0%} of the "
        f"replayed op time is the per-op constants qnn_op_ns and qnn_hvx_op_ns. The fused groups save "
        f"{schedule['saved_us']:.2f} us in the replay, each counted alone.", ""]


def _table(title: str, text: str, columns: list[str]) -> list[str]:
    """A Markdown section opening: title, what its numbers mean, table header."""
    return [title, "", text, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def _groups(data: dict[str, Any]) -> list[str]:
    lines = _table("## Fused groups", "One row per fused node. Tasks list their compute ops as named in the file. "
                   "Times per fused node: t1 serial today, t4 fused concurrent, saved = t1 - t4; gain is against t2 "
                   "(best existing).",
                   ["fused node", "op type", "source", "tasks (engine: compute ops)", "t1 us", "t4 us", "saved us", "gain",
                    "why"])
    for group in data["groups"]:
        tasks = "<br>".join(
            f"{t['engine']}: " + ", ".join(f"`{name}`" for name in t["compute_ops"][:MAX_TASK_NODES])
            + (f", … +{len(t['compute_ops']) - MAX_TASK_NODES}" if len(t["compute_ops"]) > MAX_TASK_NODES else "")
            + (" + folded " + ", ".join(f"`{name}`" for name in t["folded"][:MAX_TASK_NODES]) if t["folded"] else "")
            + (f", … +{len(t['folded']) - MAX_TASK_NODES}" if len(t["folded"]) > MAX_TASK_NODES else "")
            + f" ({t['nodes']} nodes)" for t in group["tasks"])
        saved = None if group["t1_us"] is None or group["t4_us"] is None else group["t1_us"] - group["t4_us"]
        lines.append(f"| `{group['fused_node']}` | `{group['op_type']}` | {group['source']} | {tasks} | {_cell(group['t1_us'])} | "
                     f"{_cell(group['t4_us'])} | {_cell(saved)} | {group['gain']:.3f} | {group['reason']} |")
    return lines + [""]


def _engines(data: dict[str, Any]) -> list[str]:
    lines = ["## Engines and gain per fused group", "",
             "What runs where and how in each fused node, which source decided (the optrace engine map or the "
             "op-type rules), and the predicted saving split into entry merge and overlap with the part that "
             "rests on the estimated per-op constants (dispatch_ns, hvx_launch_ns).", ""]
    for group in data["groups"]:
        lines += group_lines(group)
    return lines + [""]


def _op_types(data: dict[str, Any]) -> list[str]:
    lines = _table("## Op types (one function and one kernel each)",
                   "Per fused node: t1 original serial, t2 best existing (QNN DMA prefetch), t3 the expanded ops serial "
                   "(barrier), t4 concurrent (us). Entry merge = (t1-t3)/t1 and overlap = (t3-t4)/t1 add up to 1 - t4/t1; "
                   "gain = 1 - t4/t2.",
                   ["op type", "fused nodes", "tasks", "t1", "t2", "t3", "t4", "entry merge", "overlap", "gain",
                    "quota (HVX ctx / VTCM MB / tiles)"])
    for op in data["op_types"]:
        quota = "; ".join(f"{q['hvx_contexts']}/{q['vtcm_mb']:.1f}/{q['tiles']}" for q in op["quota"] or ()) or "-"
        lines.append(f"| `{op['op_type']}` | {op['fused_nodes']} | {' + '.join(op['engines'])} | {_cell(op['t1_us'])} | "
                     f"{_cell(op['t2_us'])} | {_cell(op['t3_us'])} | {_cell(op['t4_us'])} | {_percent(op['entry_merge_gain'])} | "
                     f"{_percent(op['overlap_gain'])} | {op['gain']:.1%} | {quota} |")
    return lines + [""]


def _not_fused_table(not_fused: dict[str, Any]) -> list[str]:
    """Every reason kind with its count, one full example and the next tasks it names; past MAX_KINDS one
    row says how many kinds and tasks are left and where they are listed."""
    kinds = not_fused["by_kind"]
    lines = ["## Not fused", "", f"{not_fused['total']} tasks, by reason (`hexfuse analyze --json` lists every task).", "",
             "| reason | tasks | example | also |", "|---|---|---|---|"]
    for entry in kinds[:MAX_KINDS]:
        also = entry["task_labels"][1:1 + MAX_EXAMPLE_TASKS]
        more = entry["tasks"] - 1 - len(also)
        lines.append(f"| {entry['kind']} | {entry['tasks']} | {entry['example']} | "
                     + (", ".join(also) + (f", … +{more}" if more > 0 else "") if also else "-") + " |")
    if len(kinds) > MAX_KINDS:
        rest = kinds[MAX_KINDS:]
        lines.append(f"| … {len(rest)} more reason kinds | {sum(e['tasks'] for e in rest)} | "
                     "listed by `hexfuse analyze --json` (not_fused.by_kind) | - |")
    return lines + [""]


def render_report(data: dict[str, Any]) -> str:
    lines = _header(data)
    if data["summary"] is not None:
        lines += _summary(data["summary"])
    if data["verification"] is not None:
        lines += ["## Verification", "", data["verification"]["text"], ""]
    if data.get("written_model"):
        lines += ["## Written model", "", "Besides the fused nodes, a runtime sees these changes:", ""]
        lines += [f"- {line}" for line in data["written_model"]] + [""]
    if data["groups"]:
        lines += _groups(data) + _engines(data) + _op_types(data)
    if data["not_fused"]["by_kind"]:
        lines += _not_fused_table(data["not_fused"])
    return "\n".join(lines)
