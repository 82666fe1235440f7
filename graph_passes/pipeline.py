"""The pass end to end: load -> single-consumer DQs -> analyse -> find -> select -> rewrite -> check.

    analyze_model(path)  what could be fused and why (no model written)
    fuse_model(path)     the fused model, its fusion spec and a human report, in memory
    write_outputs(...)   model + ``.hexfuse.json`` spec + ``.hexfuse.md`` report, each written atomically
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx

from hexfuse.graph_passes.analysis import Analysis
from hexfuse.graph_passes.balance import Scorer
from hexfuse.graph_passes.candidates import find_candidates
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.io import write_atomic
from hexfuse.graph_passes.load import PROTOBUF_LIMIT, LoadedModel, load_model
from hexfuse.graph_passes.names import NameScope
from hexfuse.graph_passes.qdq import duplicate_shared_dequantize
from hexfuse.graph_passes.rewrite import rewrite_groups, written_changes
from hexfuse.graph_passes.select import Selection, select_groups
from hexfuse.graph_passes.sources import Sources
from hexfuse.graph_passes.spec import FUSED_DOMAIN, FusedOp, FusionSpec
from hexfuse.graph_passes.spec_builder import fused_op_spec, group_nodes, group_op_type


DEFAULT_TARGET = "sm8550"
DEFAULT_MIN_GAIN = 0.1


@dataclass
class AnalyzeResult:
    loaded: LoadedModel
    prepared: onnx.ModelProto  # the model the pass edits (DQs single-consumer, sorted)
    analysis: Analysis
    selection: Selection
    fused_ops: list[FusedOp]  # one per selected group, named
    already_fused: bool = False
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage


@dataclass
class FuseResult:
    analyzed: AnalyzeResult
    model_bytes: bytes  # what to write as the output model
    spec: FusionSpec
    changed: bool
    model_changes: tuple[str, ...] = ()  # what else a runtime sees differently in the written model


def spec_path(model_path: Path) -> Path:
    return model_path.with_suffix(".hexfuse.json")


def report_path(model_path: Path) -> Path:
    return model_path.with_suffix(".hexfuse.md")


def _is_fused(model: onnx.ModelProto) -> bool:
    return any(f.domain == FUSED_DOMAIN for f in model.functions) or any(
        node.domain == FUSED_DOMAIN for node in model.graph.node
    )


def default_scorer() -> Scorer:
    from hexfuse.graph_passes.cost.cli import scorer_for

    return scorer_for(DEFAULT_TARGET, DEFAULT_MIN_GAIN)


def analyze_model(path: str | Path, scorer: Scorer | None = None,
                  supported_ops: frozenset[str] | None = None) -> AnalyzeResult:
    """``supported_ops``: op types the backend can run inside a fused node (None: no limit)."""
    scorer = scorer or default_scorer()
    timings: dict[str, float] = {}
    start = time.perf_counter()
    loaded = load_model(path)
    timings["load"] = time.perf_counter() - start
    prepared, _ = duplicate_shared_dequantize(loaded.model)
    inferred = loaded.inferred
    if prepared is not loaded.model:
        inferred = onnx.shape_inference.infer_shapes(prepared, check_type=True, strict_mode=True, data_prop=True)
    timings["prepare"] = time.perf_counter() - start - timings["load"]
    mark = time.perf_counter()
    analysis = Analysis.of(inferred, supported_ops)
    timings["analyse"] = time.perf_counter() - mark
    mark = time.perf_counter()
    already = _is_fused(loaded.model)
    if already:
        selection = Selection((), {task.id: "model is already fused by hexfuse" for task in analysis.tasks if task.fusable})
    else:
        selection = select_groups(analysis, find_candidates(analysis), scorer)
    fused_ops = []
    names = NameScope(prepared)  # the model may already use names like ours
    sources = Sources(prepared, analysis)
    for number, group in enumerate(selection.groups):
        op_type = names.fresh(group_op_type(analysis, group.tasks, number))
        node_name = names.fresh(f"hexfuse/{op_type}")
        op = fused_op_spec(analysis, group.tasks, op_type, node_name, group.verdict.gain)
        fused_ops.append(replace(op, source=sources.kind(group.tasks)))
    timings["select"] = time.perf_counter() - mark
    return AnalyzeResult(loaded, prepared, analysis, selection, fused_ops, already, timings)


def _target_name(scorer: Scorer) -> str:
    target = getattr(scorer, "target", None)  # the cost model's scorer knows its target
    return target.name if target is not None else scorer.name


def fuse_model(path: str | Path, scorer: Scorer | None = None,
               supported_ops: frozenset[str] | None = None) -> FuseResult:
    scorer = scorer or default_scorer()
    target = _target_name(scorer)
    analyzed = analyze_model(path, scorer, supported_ops)
    loaded = analyzed.loaded
    if not analyzed.fused_ops:
        spec = FusionSpec(loaded.path.name, loaded.sha256, target, ())
        return FuseResult(analyzed, loaded.raw, spec, changed=False)
    mark = time.perf_counter()
    groups = [
        (op, group_nodes(analyzed.analysis, group.tasks))
        for op, group in zip(analyzed.fused_ops, analyzed.selection.groups)
    ]
    fused = rewrite_groups(analyzed.prepared, analyzed.analysis.flow.graph, groups)
    if fused.ByteSize() > PROTOBUF_LIMIT:
        raise HexfuseError(
            f"{loaded.path}: the fused model would be {fused.ByteSize() / 2**30:.2f} GiB, over protobuf's 2 GiB limit; "
            "writing fused models with external data is not supported yet"
        )
    try:
        # Structure only: strict shape inference over thousands of function call sites costs more than
        # the whole pass, and `hexfuse fuse` runs the model on ONNX Runtime right after (the tests run
        # full_check on every bundled output).
        onnx.checker.check_model(fused)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise HexfuseError(f"internal error: the fused model fails onnx.checker: {exc}") from None
    analyzed.timings["rewrite"] = time.perf_counter() - mark
    spec = FusionSpec(loaded.path.name, loaded.sha256, target, tuple(analyzed.fused_ops))
    changes = written_changes(loaded.model, fused, loaded.upgraded_from,
                              len(analyzed.prepared.graph.node) - len(loaded.model.graph.node))
    return FuseResult(analyzed, fused.SerializeToString(), spec, changed=True, model_changes=changes)


def write_outputs(result: FuseResult, out: Path, report_text: str) -> None:
    """Write the model, then its spec and report; each file appears whole or not at all."""
    if out.exists() and out.is_dir():
        raise HexfuseError(f"{out}: is a directory, expected an output .onnx path")
    if out.resolve() == result.analyzed.loaded.path.resolve():
        raise HexfuseError(f"{out}: refusing to overwrite the input model")
    spec = result.spec
    spec = FusionSpec(out.name, spec.source_sha256, spec.target, spec.fused_ops)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HexfuseError(f"{out}: cannot create output directory: {exc.strerror}") from None
    write_atomic(out, result.model_bytes)
    write_atomic(spec_path(out), spec.to_json().encode())
    write_atomic(report_path(out), report_text.encode())
