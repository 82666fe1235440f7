"""Merge models into one graph that runs them as independent requests (``hexfuse merge``; two or more).

    prefill.onnx:  ids ──> [P] ──> logits        merged:  prefill/ids ──> [prefill/…] ──> prefill/logits
    decode.onnx:   ids ──> [D] ──> logits   ==>           decode/ids  ──> [decode/…]  ──> decode/logits
                                                          W (same bytes in P and D): stored once, read by both

Every node and non-shared tensor name gets its request's prefix (``<name>/``), so inputs and outputs
stay disjoint. An initializer (2+ elements) whose dtype, shape and bytes are equal in both models is
stored once (under its own name when both models call it the same, else under the first model's
prefixed name).
The requests share no node, so no task of one reaches a task of the other: ``hexfuse fuse`` pairs the
matrix work of one with the vector work of the other like any two branches. The model records its
requests (``hexfuse.requests`` metadata) so reports can say which request a task came from.

Off the pass's hot path, so the surgery uses onnx-graphsurgeon: renaming a tensor object renames every
use of it, and pointing a node at the other model's constant is one assignment. Sub-byte initializers
(INT4/UINT4 weights of w4a16 models, ...) never enter gs's numpy round trip: gs (0.6.1) writes a loaded
constant as one byte per element, twice a packed int4 tensor's size, which onnx rejects. They are compared
from their TensorProto and written back as that TensorProto, packed as read.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper
from onnx_graphsurgeon.ir.tensor import LazyValues

from hexfuse.graph_passes.analysis.sources import REQUESTS_KEY
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.graph.dataflow import overridable_initializers
from hexfuse.graph_passes.load.model import LoadedModel, load_model
from hexfuse.graph_passes.spec.model import FUSED_DOMAIN

# Scalars (scales, zero points) are stored per request. Sharing them saves nothing, and on the QNN HTP
# simulator (onnxruntime-qnn 2.7.0) sharing uint8 zero-point scalars between the requests of the merged
# llama_prefill_qdq + llama_decode_qdq changed two decode outputs by 1-2 LSB; sharing only tensors of 2+
# elements kept every output bit-identical to running the models separately.
MIN_SHARED_ELEMENTS = 2
MIN_MERGED_IR = 4  # below IR 4 every initializer is also a graph input; the merged model stores weights only
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")  # no "/": prefixes never nest, so names never clash
# element types stored packed, several to a byte (numpy holds one per byte): bits per element
_SUB_BYTE = {getattr(onnx.TensorProto, name): bits  # (onnx >= 1.16 knows INT4; FLOAT4E2M1 and INT2 came later)
             for name, bits in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
             if hasattr(onnx.TensorProto, name)}


@dataclass(frozen=True)
class Request:
    name: str
    loaded: LoadedModel

    @property
    def prefix(self) -> str:
        return f"{self.name}/"


@dataclass(frozen=True)
class Merged:
    model: onnx.ModelProto
    mapping: dict  # what ``hexfuse merge`` writes beside the model (original name -> merged name)
    shared_initializers: int
    shared_bytes: int  # bytes stored once instead of twice
    inputs: tuple[LoadedModel, ...] = ()  # the two models as read (what the writer must not overwrite)


def default_names(paths: Sequence[Path]) -> tuple[str, ...]:
    """The file stems when they are valid and all differ, else ``a``, ``b``, ``c``, ..."""
    stems = tuple(Path(path).stem for path in paths)
    if len(set(stems)) == len(stems) and all(_NAME.match(stem) for stem in stems):
        return stems
    return tuple(_letters(i) for i in range(len(paths)))


def _letters(index: int) -> str:
    return chr(ord("a") + index) if index < 26 else f"r{index}"


def _check_names(names: tuple[str, ...], count: int) -> None:
    if len(names) != count:
        raise HexfuseError(f"{len(names)} request names for {count} models; give one name per model")
    for name in names:
        if not _NAME.match(name):
            raise HexfuseError(f"request name {name!r} must be 1 to 64 ASCII characters: a letter first, then letters, "
                               "digits, '_', '.', '-'")
    clash = next((name for name in names if names.count(name) > 1), None)
    if clash is not None:
        raise HexfuseError(f"two requests are named {clash!r}: their names would clash; give each a different name")


def _check_mergeable(request: Request) -> None:
    model, path = request.loaded.model, request.loaded.path
    if model.ir_version > onnx.IR_VERSION:
        raise HexfuseError(f"{path}: IR version {model.ir_version} is newer than the newest supported ({onnx.IR_VERSION})")
    if any(o.domain == FUSED_DOMAIN for o in model.opset_import) or any(f.domain == FUSED_DOMAIN for f in model.functions):
        raise HexfuseError(f"{path}: already fused by hexfuse; merge the original models, then fuse the merged one")
    initializers = {init.name for init in model.graph.initializer}
    for info in model.graph.input:
        if info.name in initializers:
            continue  # IR<4 weight listed as an input: it keeps its value
        dims = info.type.tensor_type.shape.dim if info.type.HasField("tensor_type") else ()
        for axis, dim in enumerate(dims):
            if not dim.HasField("dim_value"):
                what = f"symbolic {dim.dim_param!r}" if dim.dim_param else "unknown"
                raise HexfuseError(
                    f"{path}: input {info.name!r} has a {what} dimension on axis {axis}; the pass pairs tasks by their "
                    "static cost, so fix the shapes (e.g. onnxruntime.tools.make_dynamic_shape_fixed) before merging")


def _merged_opsets(requests: list[Request]) -> list[onnx.OperatorSetIdProto]:
    versions: dict[str, tuple[int, Request]] = {}
    for request in requests:
        for opset in request.loaded.model.opset_import:
            domain = "" if opset.domain == "ai.onnx" else opset.domain
            seen = versions.setdefault(domain, (opset.version, request))
            if seen[0] != opset.version:
                label = domain or "ai.onnx"
                raise HexfuseError(
                    f"incompatible opsets: {seen[1].loaded.path.name} imports {label} {seen[0]} but "
                    f"{request.loaded.path.name} imports {label} {opset.version}; convert one (onnx.version_converter) first")
    return [onnx.helper.make_opsetid(domain, version) for domain, (version, _) in sorted(versions.items())]


def _merged_functions(requests: list[Request]) -> list[onnx.FunctionProto]:
    """Model-local functions of both; one defined differently in the two cannot be told apart at call sites."""
    kept: dict[tuple[str, str, str], onnx.FunctionProto] = {}
    for request in requests:
        for function in request.loaded.model.functions:
            key = (function.domain, function.name, function.overload)
            other = kept.setdefault(key, function)
            if other.SerializeToString(deterministic=True) != function.SerializeToString(deterministic=True):
                raise HexfuseError(
                    f"name clash: both models define local function {function.domain}::{function.name} differently; "
                    "rename it in one of them before merging")
    return list(kept.values())


def _constant_key(dtype: str, values: np.ndarray) -> tuple:
    values = np.ascontiguousarray(values)
    return (dtype, values.shape, hashlib.sha256(values.tobytes()).digest())


def _keep_packed(graph: gs.Graph, model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Each sub-byte constant of ``graph`` left to gs as a copy of its TensorProto, which gs's exporter writes
    as is (renamed: hence the copy, so ``model`` keeps its names); the copies by original name."""
    protos = {init.name: init for init in model.graph.initializer if init.data_type in _SUB_BYTE}
    packed = {}
    for name, tensor in graph.tensors().items():
        if isinstance(tensor, gs.Constant) and name in protos:
            packed[name] = onnx.TensorProto()
            packed[name].CopyFrom(protos[name])
            tensor.values = LazyValues(packed[name])
    return packed


def _values(tensor: gs.Constant, name: str, packed: dict[str, onnx.TensorProto]) -> tuple[str, np.ndarray, int]:
    """A constant's type, values to compare and stored bytes, without loading a sub-byte one into gs. A sub-byte
    type goes by its ONNX name: an older onnx unpacks INT4 into int8, which must not match an INT8 tensor."""
    if name not in packed:
        return str(tensor.values.dtype), tensor.values, int(tensor.values.nbytes)
    proto = packed[name]
    values = numpy_helper.to_array(proto)  # one element per byte
    return onnx.TensorProto.DataType.Name(proto.data_type), values, (values.size * _SUB_BYTE[proto.data_type] + 7) // 8


def _rename(requests: list[Request], graphs: list[gs.Graph]) -> tuple[int, int]:
    """Prefix every name; point each model at an earlier one's byte-identical constants. Returns
    (shared initializers, bytes saved)."""
    prefixes = tuple(r.prefix for r in requests)
    first: dict[tuple, gs.Constant] = {}
    first_name: dict[int, str] = {}  # id(constant) -> its name in its own model
    unprefixed: dict[str, int] = {}  # a shared constant's own name -> id of the constant that has it
    shared, saved = 0, 0
    for number, (request, graph) in enumerate(zip(requests, graphs)):
        packed = _keep_packed(graph, request.loaded.model)
        tensors = graph.tensors()
        # a weight that is also a graph input or output keeps its own prefixed name: sharing it would
        # leave a second, unprefixed name at the model's edge
        overridable = overridable_initializers(request.loaded.model)  # (gs drops them from the inputs)
        edge = {id(t) for t in (*graph.inputs, *graph.outputs)} | {id(t) for n, t in tensors.items() if n in overridable}
        for index, node in enumerate(graph.nodes):
            node.name = request.prefix + (node.name or f"{node.op}_{index}")
        for name, tensor in tensors.items():
            if not name:
                continue  # an omitted optional input
            if not isinstance(tensor, gs.Constant):
                tensor.name = request.prefix + name
                continue
            dtype, values, stored = _values(tensor, name, packed)
            key = _constant_key(dtype, values) if values.size >= MIN_SHARED_ELEMENTS and id(tensor) not in edge else None
            kept = first.get(key) if key is not None else None
            if kept is None:
                if key is not None:  # the first model holding these bytes keeps them for every later one
                    first[key] = tensor
                    first_name[id(tensor)] = name
                tensor.name = request.prefix + name
                continue
            for node in list(tensor.outputs):  # every reader of B's copy reads A's instead
                for slot, used in enumerate(node.inputs):
                    if used is tensor:
                        node.inputs[slot] = kept
            if first_name[id(kept)] == name and not name.startswith(prefixes) and \
                    unprefixed.setdefault(name, id(kept)) == id(kept):
                # the models call it the same: keep the name (no prefixed name starts so), unless other
                # requests already share other bytes under that name (two pairs of three or more requests)
                kept.name = name
            shared += 1
            saved += stored
    return shared, saved


def _mapping(requests: list[Request], model: onnx.ModelProto) -> dict:
    def side(infos, request: Request) -> dict[str, str]:
        return {info.name: request.prefix + info.name for info in infos}

    return {
        "merged_inputs": [info.name for info in model.graph.input],
        "requests": [
            {"name": r.name, "prefix": r.prefix, "model": r.loaded.path.name, "sha256": r.loaded.sha256,
             "inputs": side(_fed_inputs(r), r), "outputs": side(r.loaded.model.graph.output, r)}
            for r in requests
        ],
    }


def merge_models(path_a: str | Path, path_b: str | Path, names: tuple[str, str] | None = None) -> Merged:
    """Two requests in one model (merge_requests with two paths)."""
    return merge_requests((path_a, path_b), names)


def merge_requests(paths: Sequence[str | Path], names: Sequence[str] | None = None) -> Merged:
    """One model computing every request: disjoint prefixed inputs/outputs, byte-identical weights stored once."""
    if len(paths) < 2:
        raise HexfuseError(f"merging needs two or more models, got {len(paths)}")
    names = tuple(names) if names else default_names([Path(p) for p in paths])
    _check_names(names, len(paths))
    requests = [Request(name, load_model(path)) for name, path in zip(names, paths)]
    for request in requests:
        _check_mergeable(request)
    opsets = _merged_opsets(requests)
    functions = _merged_functions(requests)
    graphs = [gs.import_onnx(_without_functions(r.loaded.model)) for r in requests]
    shared, saved = _rename(requests, graphs)
    graph = gs.Graph(
        nodes=[node for g in graphs for node in g.nodes], inputs=[t for g in graphs for t in g.inputs],
        outputs=[t for g in graphs for t in g.outputs], name="+".join(names),
    )
    model = gs.export_onnx(graph, do_type_check=True, opset_imports=opsets)
    _restore_inputs(model, requests)
    model.functions.extend(functions)
    model.ir_version = max(MIN_MERGED_IR, *(r.loaded.model.ir_version for r in requests))
    model.producer_name, model.producer_version = "hexfuse merge", ""
    entry = model.metadata_props.add()
    entry.key, entry.value = REQUESTS_KEY, json.dumps([[r.name, r.prefix] for r in requests])
    _check_merged(model, requests)
    return Merged(model, _mapping(requests, model), shared, saved, tuple(r.loaded for r in requests))


def _restore_inputs(model: onnx.ModelProto, requests: list[Request]) -> None:
    """The merged inputs are the requests' own, prefixed, in their order: gs turns a graph input that
    has an initializer (overridable, IR >= 4) into a plain constant, which no feed could override."""
    inputs = []
    for request in requests:
        for info in _fed_inputs(request):
            copy = onnx.ValueInfoProto()
            copy.CopyFrom(info)
            copy.name = request.prefix + info.name
            inputs.append(copy)
    del model.graph.input[:]
    model.graph.input.extend(inputs)


def _fed_inputs(request: Request) -> list[onnx.ValueInfoProto]:
    """The graph inputs a feed may set (IR < 4 lists every weight as an input too: still a weight)."""
    source = request.loaded.model
    weights = {init.name for init in source.graph.initializer} - overridable_initializers(source)
    return [info for info in source.graph.input if info.name not in weights]


def _without_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """gs would re-export local functions through its own object model; they are merged as protobuf instead."""
    if not model.functions:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.functions[:]
    return copy


def _check_merged(model: onnx.ModelProto, requests: list[Request]) -> None:
    names = [n for n in (*(i.name for i in model.graph.input), *(o for node in model.graph.node for o in node.output)) if n]
    if len(names) != len(set(names)):
        clash = next(n for n in names if names.count(n) > 1)
        raise HexfuseError(f"name clash: {clash!r} is defined twice in the merged model; choose other request names")
    try:
        onnx.checker.check_model(model)
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception as exc:  # checker and inference raise several types from C++
        label = " + ".join(r.loaded.path.name for r in requests)
        raise HexfuseError(f"internal error: merging {label} gave an invalid model: {str(exc).splitlines()[0]}") from None
