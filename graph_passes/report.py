"""Human-readable text for ``hexfuse analyze`` and the ``.hexfuse.md`` report of ``hexfuse fuse``."""

from __future__ import annotations

from collections import Counter

from hexfuse.graph_passes.pipeline import AnalyzeResult
from hexfuse.graph_passes.sources import Sources

MAX_EXAMPLES = 12


def _reason_kind(reason: str) -> str:
    """Collapse node names out of a reason so that similar reasons count together."""
    if " reaches " in reason:
        return "depends on every nearby task of another engine (a path links them)"
    if "too far in the schedule" in reason:
        return "nearest task of another engine is beyond the reachability window"
    if "hazard" in reason:
        return "buffer hazard (RAW/WAR/WAW through views)"
    if "scorer" in reason:
        return "partner rejected by the scorer (not worth fusing)"
    return reason


def render_report(result: AnalyzeResult, title: str) -> str:
    analysis = result.analysis
    loaded = result.loaded
    lines = [f"# hexfuse: {title}", ""]
    lines.append(f"- model: `{loaded.path.name}` (sha256 `{loaded.sha256[:16]}…`), {len(analysis.flow.nodes)} nodes")
    if loaded.upgraded_from is not None:
        lines.append(f"- opset upgraded from {loaded.upgraded_from} for analysis")
    histogram = ", ".join(f"{engine} {count}" for engine, count in analysis.engine_histogram().items() if count)
    lines.append(f"- units by engine: {histogram}")
    fusable = [task for task in analysis.tasks if task.fusable]
    lines.append(f"- tasks: {len(fusable)} fusable of {len(analysis.tasks)}")
    lines.append(f"- fused groups: {len(result.fused_ops)}")
    if result.already_fused:
        lines.append("- the model already holds hexfuse fused nodes: nothing more is done")
    lines.append("")
    if result.fused_ops:
        sources = Sources(result.prepared, analysis)
        lines += ["## Fused groups", "", "| fused op | source | tasks (engine: first node, nodes) | predicted gain | why |",
                  "|---|---|---|---|---|"]
        for op, group in zip(result.fused_ops, result.selection.groups):
            tasks = "<br>".join(f"{t.engine}: `{t.nodes[0].name or t.nodes[0].op_type}`, {len(t.nodes)}" for t in op.tasks)
            source = sources.describe(group.tasks)
            lines.append(f"| `{op.op_type}` | {source} | {tasks} | {group.verdict.gain:.3f} | {group.verdict.reason} |")
        lines.append("")
    reasons = result.selection.reasons
    if reasons:
        lines += ["## Not fused", "", "| reason | tasks | example |", "|---|---|---|"]
        kinds = Counter(_reason_kind(reason) for reason in reasons.values())
        examples: dict[str, str] = {}
        for task_id in sorted(reasons):
            examples.setdefault(_reason_kind(reasons[task_id]), f"{analysis.task_label(analysis.tasks[task_id])}: {reasons[task_id]}")
        for kind, count in sorted(kinds.items(), key=lambda item: (-item[1], item[0]))[:MAX_EXAMPLES]:
            lines.append(f"| {kind} | {count} | {examples[kind]} |")
        lines.append("")
    return "\n".join(lines)
