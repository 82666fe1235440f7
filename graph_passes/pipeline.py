"""The pass end to end: load -> single-consumer DQs -> analyse -> find -> select -> name -> rewrite -> check.

    analyze_model(path)  what could be fused and why (no model written)
    fuse_model(path)     the fused model, its fusion spec and a human report, in memory
    write_outputs(...)   model + ``.hexfuse.json`` spec + ``.hexfuse.md`` report (+ timelines), all or
                         none (io.py); never over the input, its external data or its sidecars

An already fused model is written back unchanged with the spec found beside it (checked to describe
it: a stale spec is an error), so `hexfuse oppkg` works on the copy too.

Groups identical up to renaming (structure.py) share one op type: ``fused_ops`` holds one spec per op
type, ``fused_nodes`` one entry per fused group.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx

from hexfuse.graph_passes.analysis.candidates import find_candidates
from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.analysis.sources import Sources
from hexfuse.graph_passes.backend import Backend
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.graph.flat import FlatGraph
from hexfuse.graph_passes.graph.qdq import dequantize_copies
from hexfuse.graph_passes.load.io import refuse_overwrite, write_files
from hexfuse.graph_passes.load.model import MIN_OPSET, PROTOBUF_LIMIT, LoadedModel, load_model
from hexfuse.graph_passes.load.toposort import topological_order_of
from hexfuse.graph_passes.report.labels import NodeLabels
from hexfuse.graph_passes.rewrite.groups import Call, fused_node, rewrite_groups, written_changes
from hexfuse.graph_passes.select.balance import Scorer
from hexfuse.graph_passes.select.groups import Group, Selection, select_groups
from hexfuse.graph_passes.select.names import NameScope
from hexfuse.graph_passes.spec.builder import fused_op_spec, group_nodes, group_op_type
from hexfuse.graph_passes.spec.check import check_spec_describes
from hexfuse.graph_passes.spec.model import FUSED_DOMAIN, FusedOp, FusionSpec, load_spec


DEFAULT_TARGET = "sm8550"
DEFAULT_MIN_GAIN = 0.1


@dataclass(frozen=True)
class FusedNode:
    """One selected group as fused: the node that replaces it and the op type it calls."""

    group: Group
    op: int  # index of its op type in AnalyzeResult.fused_ops
    node_name: str
    nodes: tuple[int, ...]  # node indices it replaces, task after task (a function body's order)
    inputs: tuple[int, ...]  # tensor ids in the op type's input order
    outputs: tuple[int, ...]


@dataclass
class AnalyzeResult:
    loaded: LoadedModel
    prepared: onnx.ModelProto  # the model the pass edits (DQs single-consumer, sorted)
    analysis: Analysis
    selection: Selection
    fused_ops: list[FusedOp]  # one per op type (distinct group structure), in order of first use
    fused_nodes: list[FusedNode] = field(default_factory=list)  # one per selected group, in selection order
    already_fused: bool = False
    timings: dict[str, float] = field(default_factory=dict)  # CPU seconds per stage (robust on a shared machine)
    labels: NodeLabels | None = None  # node index -> a name the user finds in their file


@dataclass
class FuseResult:
    analyzed: AnalyzeResult
    model_bytes: bytes  # what to write as the output model
    spec: FusionSpec
    changed: bool
    model_changes: tuple[str, ...] = ()  # what else a runtime sees differently in the written model
    split: int = 1  # micro-batches the model was split into (microbatch/decide.py); 1: not split


def spec_path(model_path: Path) -> Path:
    return model_path.with_suffix(".hexfuse.json")


def report_path(model_path: Path) -> Path:
    return model_path.with_suffix(".hexfuse.md")


# Files hexfuse writes beside a model (fuse: spec, report, timelines; merge: the name mapping): the
# sidecars of an input are as much the user's data as the input itself.
SIDECARS = (".hexfuse.json", ".hexfuse.md", ".timeline.json", ".timeline.png", ".merge.json")


def sidecars(model_path: Path) -> list[Path]:
    stem = model_path.with_suffix("")
    return [stem.with_name(stem.name + suffix) for suffix in SIDECARS]


def protected_files(loaded: LoadedModel) -> list[tuple[Path, str]]:
    """What a run reading ``loaded`` must never write over: the file, its external data, its sidecars."""
    return [(loaded.path, "the input model"), *((data, "the input's external data") for data in loaded.external),
            *((side, "a file beside the input model") for side in sidecars(loaded.path))]


def _is_fused(model: onnx.ModelProto, flat: FlatGraph) -> bool:
    """``flat``: the model's flat graph (its domains, without a walk over the protobuf)."""
    return any(f.domain == FUSED_DOMAIN for f in model.functions) or FUSED_DOMAIN in set(flat.domains)


def default_scorer() -> Scorer:
    from hexfuse.graph_passes.cost.cli import scorer_for

    return scorer_for(DEFAULT_TARGET, DEFAULT_MIN_GAIN)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The pass allocates ~1e6 small containers that live as long as its result; the cyclic collector
    would scan them again and again (a third of the pass at 5e4 nodes) and find nothing, so it pauses
    meanwhile. On the way out they are moved to the permanent generation (gc.freeze): else the first
    collection after the pass scans them all once more (a tenth of the pass). The pass's own objects
    hold no reference cycles (analysis.structures refers back weakly), so freezing leaks nothing of it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.enable()


def _folds(scorer: Scorer) -> frozenset[str]:
    """Epilogue op types the scorer's target folds into matrix ops (none for target-free scorers)."""
    target = getattr(scorer, "target", None)
    return frozenset(getattr(target, "folds", ()))


def _scorer_or_default(scorer: Scorer | None) -> Scorer:
    """The library's callers get a TypeError for what is no scorer (a target name is not one: see
    cost/cli.py scorer_for), not an AttributeError deep in the selection."""
    if scorer is None:
        return default_scorer()
    if not (isinstance(getattr(scorer, "name", None), str) and callable(getattr(scorer, "score", None))):
        raise TypeError(f"scorer must be a Scorer (a name and a score method, e.g. cost.cli.scorer_for(target, "
                        f"min_gain)), not {type(scorer).__name__}")
    return scorer


def analyze_model(path: str | Path, scorer: Scorer | None = None, backend: Backend | None = None) -> AnalyzeResult:
    """``backend``: what runs the fused nodes can do (backend.py; None: no limit)."""
    with gc_paused():
        return _analyze(path, _scorer_or_default(scorer), backend)


def _analyze(path: str | Path, scorer: Scorer, backend: Backend | None) -> AnalyzeResult:
    timings: dict[str, float] = {}
    start = time.process_time()
    loaded = load_model(path)
    timings["load"] = time.process_time() - start
    mark = time.process_time()
    typed = loaded.typed.graph
    flat = FlatGraph.build(loaded.model, typed)
    listed = (flat.node_names, flat.op_types) if loaded.origin is None else None  # the file's nodes, as read
    copies = dequantize_copies(loaded.model, flat)
    if copies.made:
        flat = FlatGraph.build(copies.model, typed, copies.aliases)
    prepared = copies.model
    labels = NodeLabels(loaded.file if loaded.file is not None else loaded.model.graph, prepared.graph, loaded.origin,
                        copies.sources, copies.copies, MIN_OPSET if loaded.upgraded_from is not None else None, listed)
    timings["prepare"] = time.process_time() - mark
    mark = time.process_time()
    analysis = Analysis.of(prepared, backend, folds=_folds(scorer), flat=flat, label=labels,
                           engine_map=getattr(scorer, "engines", None))  # the cost scorer carries the model's map
    timings["analyse"] = time.process_time() - mark
    mark = time.process_time()
    already = _is_fused(loaded.model, flat)
    if already:
        selection = Selection((), {task.id: "model is already fused by hexfuse" for task in analysis.tasks if task.fusable})
    else:
        selection = select_groups(analysis, find_candidates(analysis), scorer)
    timings["select"] = time.process_time() - mark
    mark = time.process_time()
    fused_ops, fused_nodes = name_groups(analysis, selection, Sources(prepared, analysis))
    timings["name"] = time.process_time() - mark
    return AnalyzeResult(loaded, prepared, analysis, selection, fused_ops, fused_nodes, already, timings, labels)


def name_groups(analysis: Analysis, selection: Selection, sources: Sources) -> tuple[list[FusedOp], list[FusedNode]]:
    """One op type per distinct group structure (structure.py), one fused node per group.

    The first group of a structure is its op type's representative: the spec and the function body
    are built from it; the spec's ``instances`` lists every fused node that calls the op type."""
    flat, structures = analysis.flat, analysis.structures
    names = NameScope(flat.model, flat.names, {op for op, _ in flat.op_table[0]}, flat.node_names,
                      flat.subgraph_names)  # the model may use names like ours
    op_of_key: dict[int, int] = {}
    representatives: list[Group] = []
    op_types: list[str] = []
    instances: list[list[str]] = []
    fused_nodes: list[FusedNode] = []
    for group, key in zip(selection.groups, structures.groups([group.tasks for group in selection.groups])):
        op = op_of_key.get(key)
        if op is None:
            op = op_of_key[key] = len(representatives)
            representatives.append(group)
            op_types.append(names.fresh(group_op_type(analysis, group.tasks, op)))
            instances.append([])
        node_name = names.fresh(f"hexfuse/{op_types[op]}")
        instances[op].append(node_name)
        inputs, outputs = structures.group_io(group.tasks)
        fused_nodes.append(FusedNode(group, op, node_name, tuple(group_nodes(analysis, group.tasks)),
                                     tuple(inputs), tuple(outputs)))
    fused_ops = [
        replace(fused_op_spec(analysis, group.tasks, op_types[op], instances[op][0], group.verdict.gain),
                instances=tuple(instances[op]), source=sources.kind(group.tasks))
        for op, group in enumerate(representatives)
    ]
    return fused_ops, fused_nodes


def _target_name(scorer: Scorer) -> str:
    target = getattr(scorer, "target", None)  # the cost model's scorer knows its target
    return target.name if target is not None else scorer.name


def fuse_model(path: str | Path, scorer: Scorer | None = None, backend: Backend | None = None) -> FuseResult:
    with gc_paused():
        return _fuse(path, _scorer_or_default(scorer), backend)


def _fuse(path: str | Path, scorer: Scorer, backend: Backend | None) -> FuseResult:
    target = _target_name(scorer)
    analyzed = analyze_model(path, scorer, backend)
    loaded = analyzed.loaded
    if analyzed.already_fused:
        spec = _carried_spec(loaded) or FusionSpec(loaded.path.name, loaded.sha256, target, ())
        return FuseResult(analyzed, loaded.self_contained(), spec, changed=False)
    if not analyzed.fused_ops:
        spec = FusionSpec(loaded.path.name, loaded.sha256, target, ())
        return FuseResult(analyzed, loaded.self_contained(), spec, changed=False)
    mark = time.process_time()
    calls = [Call(n.op, n.node_name, n.nodes, n.inputs, n.outputs) for n in analyzed.fused_nodes]
    fused = rewrite_groups(analyzed.prepared, analyzed.analysis.flat, analyzed.fused_ops, calls)
    model_bytes = _serialized(loaded.path, fused)
    try:
        # The load checked the model; the rewrite adds functions and call nodes and orders the nodes
        # (rewrite/groups.py proves the order). The checker sees the new parts in a model of their own: the
        # whole fused model again costs as much as the rewrite (`hexfuse fuse` then verifies it,
        # verify.py, and the tests run full_check on every bundled output).
        onnx.checker.check_model(_new_parts(fused, analyzed.analysis.flat, analyzed.fused_ops, calls))
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise HexfuseError(f"internal error: the fused model fails onnx.checker: {exc}") from None
    analyzed.timings["rewrite"] = time.process_time() - mark
    spec = FusionSpec(loaded.path.name, loaded.sha256, target, tuple(analyzed.fused_ops))
    changes = written_changes(loaded.model, fused, loaded.upgraded_from,
                              len(analyzed.prepared.graph.node) - len(loaded.model.graph.node))
    if loaded.densified:
        changes += (f"{len(loaded.densified)} sparse initializers stored dense (the pass reads them dense)",)
    if loaded.external:
        changes += (f"weights from {len(loaded.external)} external-data files stored in the model",)
    return FuseResult(analyzed, model_bytes, spec, changed=True, model_changes=changes)


def _serialized(path: Path, fused: onnx.ModelProto) -> bytes:
    """The fused model's bytes; refused over protobuf's limit (sized only then: sizing costs a walk)."""
    try:
        model_bytes = fused.SerializeToString()
    except Exception:  # protobuf's EncodeError on a message over its limit
        model_bytes = None
    if model_bytes is None or len(model_bytes) > PROTOBUF_LIMIT:
        try:
            size = f"{fused.ByteSize() / 2**30:.2f} GiB"
        except Exception:  # protobuf may refuse to size it too
            size = "over 2 GiB"
        raise HexfuseError(f"{path}: the fused model would be {size}, over protobuf's 2 GiB limit; "
                           "writing fused models with external data is not supported yet")
    return model_bytes


def _carried_spec(loaded: LoadedModel) -> FusionSpec | None:
    """The spec beside an already fused model, checked to describe it; None where there is none
    (the copy then gets a spec without fused ops, and `hexfuse oppkg` says it does not describe it)."""
    beside = spec_path(loaded.path)
    if not beside.is_file():
        return None
    spec = load_spec(str(beside))
    check_spec_describes(loaded.path, loaded.raw, spec, beside)
    return spec


def _new_parts(fused: onnx.ModelProto, flat: FlatGraph, ops: Sequence[FusedOp], calls: list[Call]) -> onnx.ModelProto:
    """The fused model's functions, each called once by its first fused node, inputs and outputs typed
    (weights as typed inputs: the checker needs their types, not their data)."""
    first = _called_first({call.op: call for call in reversed(calls)}.values())  # per op, the first call
    produced = {tensor for call in first for tensor in call.outputs}
    inputs: dict[int, None] = {}
    outputs: dict[int, None] = {}
    for call in first:
        inputs.update((t, None) for t in call.inputs if t not in produced)
        outputs.update((t, None) for t in call.outputs)
    nodes = [fused_node(ops[call.op], call, flat.names) for call in first]

    def typed(tensor: int) -> onnx.ValueInfoProto:
        info = flat.type_source.get(tensor)
        if info is not None:
            return info
        kind = flat.type(tensor)  # an initializer: typed by its data type and dims
        if kind is not None and kind.shape is not None:
            return onnx.helper.make_tensor_value_info(flat.names[tensor], kind.elem_type, kind.shape)
        return onnx.helper.make_empty_tensor_value_info(flat.names[tensor])

    graph = onnx.helper.make_graph(nodes, "hexfuse_new_parts", [typed(t) for t in inputs], [typed(t) for t in outputs])
    model = onnx.ModelProto(ir_version=fused.ir_version, opset_import=fused.opset_import, graph=graph)
    model.functions.extend(fused.functions)
    return model


def _called_first(calls: Iterable[Call]) -> list[Call]:
    """The calls in an order where each comes after those whose outputs it reads, else in the order of
    their first nodes (the rewrite proved there is no cycle)."""
    by_first = sorted(calls, key=lambda call: min(call.nodes))
    order = topological_order_of([list(map(str, call.inputs)) for call in by_first],
                                 [list(map(str, call.outputs)) for call in by_first])  # tensor ids as names
    return [by_first[i] for i in order]


def write_outputs(result: FuseResult, out: Path, report_text: str,
                  extra: list[tuple[Path, bytes]] | None = None) -> list[Path]:
    """Write the model, its spec (with the model's hash), its report and ``extra`` files: all or none
    (io.write_files), none of them over a file the run reads. Returns the paths written."""
    out = Path(out)
    if out.exists() and out.is_dir():
        raise HexfuseError(f"{out}: is a directory, expected an output .onnx path")
    spec = result.spec
    spec = replace(spec, model=out.name, model_sha256=hashlib.sha256(result.model_bytes).hexdigest())
    files = [(out, result.model_bytes), (spec_path(out), spec.to_json().encode()),
             (report_path(out), report_text.encode()), *(extra or [])]
    refuse_overwrite([path for path, _ in files], protected_files(result.analyzed.loaded))
    write_files(files)
    return [path for path, _ in files]
