"""What ``hexfuse analyze`` prints and ``hexfuse fuse`` writes, after the pass has run.

    fuse     verify (verify.py) ─> nothing written on a failure
             ─> OUT.onnx, OUT.hexfuse.json (spec), OUT.hexfuse.md (report), OUT.timeline.json (Perfetto),
                OUT.timeline.png only with ``plot``; all of them or none (pipeline.write_outputs)
    analyze  the report's data (document.py): Markdown, or the same dict as JSON

The cost summary and the timelines need the cost model's scorer; with another scorer (tests use the
target-free balance scorer) the report says what the pass found without predicted times.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import refuse_overwrite, same_file
from hexfuse.graph_passes.select.balance import Scorer
from hexfuse.graph_passes.pipeline import (
    AnalyzeResult, FuseResult, protected_files, report_path, sidecars, spec_path, write_outputs,
)
from hexfuse.graph_passes.report.document import render_report, report_data
from hexfuse.graph_passes.rewrite.verify import Verification, verify


@dataclass(frozen=True)
class Written:
    paths: list[Path]
    verification: Verification | None
    report: dict[str, Any]


def _cost_scorer(scorer: Scorer):
    from hexfuse.graph_passes.cost.scorer import CostScorer

    return scorer if isinstance(scorer, CostScorer) else None


def analysis_report(result: AnalyzeResult, scorer: Scorer, title: str, verification: Verification | None = None,
                    every_task: bool = True) -> dict[str, Any]:
    """The report's data, with the whole-model cost summary where the scorer is the cost model."""
    cost = _cost_scorer(scorer)
    summary = None
    if cost is not None:
        from hexfuse.graph_passes.cost.summary import summarize

        summary = summarize(result.analysis, result.selection.groups, cost)
    return report_data(result, scorer, title, summary, verification, every_task)


def report_json(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def verify_result(result: FuseResult, seed: int = 0) -> Verification:
    """verify.py on a fused result; raises HexfuseError when any compared tensor differs."""
    analyzed = result.analyzed
    flat, labels = analyzed.analysis.flat, analyzed.labels
    representatives, seen = [], set()
    for node in analyzed.fused_nodes:
        if node.op not in seen:
            seen.add(node.op)
            representatives.append(node.node_name)
    copies: dict[int, int] = {}
    if labels is not None and labels.sources is not None:
        original = {loaded: edited for edited, loaded in enumerate(labels.sources) if edited not in labels.copies}
        copies = {edited: original[labels.sources[edited]] for edited in labels.copies}

    def types(name: str):
        tensor = flat.ids.get(name)
        return flat.type_source.get(tensor) if tensor is not None else None

    loaded = analyzed.loaded
    against_file = loaded.upgraded_from is not None or result.split > 1
    # Only a model checked against the file runs the file; ONNX Runtime given bytes must get the data inline.
    file_bytes = loaded.self_contained() if against_file else loaded.raw
    # Without a fused node the written model is the loaded one (no DQ copies: those are made for the groups).
    made_from = analyzed.prepared if analyzed.fused_nodes else loaded.model
    verification = verify(file_bytes, made_from, result.model_bytes, representatives,
                          {node.node_name: list(node.nodes) for node in analyzed.fused_nodes},
                          copies if analyzed.fused_nodes else {}, types, against_file, seed)
    worst = verification.worst
    if worst is not None and not verification.equal:
        raise HexfuseError(f"fused model differs from the original on {worst.name!r} (max rel error {worst.max_rel:.3g}); "
                           "nothing written")
    return verification


def check_outputs(result: FuseResult, out: Path, scorer: Scorer, plot: bool = False) -> None:
    """Refuse (one line) an output path that would write over the input, its data or its sidecars."""
    planned = [out, spec_path(out), report_path(out)]
    if result.analyzed.fused_ops and _cost_scorer(scorer) is not None:
        planned += [out.with_name(out.stem + ".timeline.json"), *([out.with_name(out.stem + ".timeline.png")] * plot)]
    refuse_overwrite(planned, _files_read(result, scorer))


def _files_read(result: FuseResult, scorer: Scorer) -> list[tuple[Path, str]]:
    """What the run read and must keep: the input and its files, and those of the cost scorer (its
    target, the model's engine map)."""
    files = protected_files(result.analyzed.loaded)
    cost = _cost_scorer(scorer)
    if cost is not None and cost.target.path:
        files.append((Path(cost.target.path), "the target file"))
    if cost is not None and cost.engines is not None and cost.engines.path:
        files.append((Path(cost.engines.path), "the engine map"))
    return files


def write_fused(result: FuseResult, out: Path, scorer: Scorer, check: bool = True, plot: bool = False,
                extra_markdown: str = "") -> Written:
    """Verify (``check``), then write every output; the input is never touched. ``extra_markdown`` is
    appended to the report (e.g. the micro-batch decision)."""
    out = Path(out)
    check_outputs(result, out, scorer, plot)  # before the verification's minutes
    verification = verify_result(result) if check and result.changed else None
    data = analysis_report(result.analyzed, scorer, f"fusion of {result.analyzed.loaded.path.name}", verification,
                           every_task=False)  # the Markdown names reason kinds, not every task
    data["written_model"] = list(result.model_changes)
    extra = []
    cost = _cost_scorer(scorer)
    if result.analyzed.fused_ops and cost is not None:
        from hexfuse.graph_passes.cost.cli import cost_report_files

        extra = cost_report_files(result.analyzed.fused_ops, cost, out.with_suffix(""), plot)
    paths = write_outputs(result, out, render_report(data) + extra_markdown, extra)
    _remove_stale_sidecars(out, paths, _files_read(result, scorer))
    return Written(paths, verification, data)


def _remove_stale_sidecars(out: Path, written: list[Path], protected: list[tuple[Path, str]]) -> None:
    """A sidecar of ``out`` this run did not write (the timeline of a model fused there before) would
    describe another model: it goes, unless the run read it."""
    for side in sidecars(out):
        if side.is_file() and not any(same_file(side, path) for path in (*written, *(p for p, _ in protected))):
            with contextlib.suppress(OSError):  # best effort: the outputs themselves are written
                side.unlink()
