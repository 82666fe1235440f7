"""Load an ONNX model for the pass: read, validate, upgrade the opset, sort, infer shapes.

Every failure becomes a one-line ``HexfuseError`` naming the file and what is wrong with it. The
input file is only read, never written.

The checker runs first: it also proves the graph topologically sorted with every input defined, so
the Python sort and definition walk run only where it fails (to sort, or to word the error).
Provenance: ``origin`` maps every node of the loaded model back to its index in the file, through
the opset upgrade (which adds nodes) and the sort, so that reports name nodes the user can find.

Symbolic dimensions (``[N, 256]``, the usual PyTorch export) leave shapes dynamic, and the pass prices
and fuses only static ones (the QNN EP needs them too). ``--fix-dim N=1`` pins them before shape
inference, with the meaning of ONNX Runtime's ``make_dynamic_shape_fixed``: every dimension named
``N`` on the graph's inputs, outputs and value_info becomes 1 (``fixed_dims`` sets the pins for one
run; ``symbolic_dims`` names what is left to pin).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper, version_converter

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.graph.subgraphs import node_reads
from hexfuse.graph_passes.load.sparse import densify_sparse_initializers
from hexfuse.graph_passes.load.toposort import topological_order
from hexfuse.graph_passes.load.weights import LeftOut, lighten

PROTOBUF_LIMIT = 2**31 - 1  # protobuf cannot serialize, check or infer a larger ModelProto in memory
MAX_DIM = 2**63 - 1  # an ONNX dimension is an int64
MIN_OPSET = 13  # older models are upgraded to this opset before the pass
MAX_OPSET = onnx.defs.onnx_opset_version()
_TAG = "\x01hexfuse#"  # temporary node name that carries a node's file index through the opset upgrade


@dataclass(frozen=True)
class LoadedModel:
    path: Path
    raw: bytes  # the file's bytes, as read
    sha256: str
    model: onnx.ModelProto  # sorted, opset >= MIN_OPSET, external data loaded
    typed: onnx.ModelProto  # ``model`` with inferred value_info for every tensor, its weights' data perhaps left out
    upgraded_from: int | None  # original default-domain opset when the pass upgraded it
    file: onnx.GraphProto | None = None  # the file's own graph, before upgrade and sort (labels)
    origin: tuple[int, ...] | None = None  # node of ``model`` -> index in ``file`` (-1: added by the upgrade); None: same
    external: tuple[Path, ...] = ()  # the external-data files the model reads (resolved), in file order
    densified: tuple[str, ...] = ()  # sparse initializers the pass reads as dense ones (sparse.py)
    fixed_dims: tuple[tuple[str, int], ...] = ()  # symbolic dimensions pinned by --fix-dim, sorted
    onnx_seconds: float = 0.0  # CPU time in onnx's checker and shape inference (C++; with the sort of an unsorted file)
    left_out: LeftOut | None = None  # the weights' data ``typed`` lacks (weights.py)

    @property
    def inferred(self) -> onnx.ModelProto:
        """``typed`` with every weight's data: given back on first use (what reads types only reads
        ``typed``: a copy of a 100 MB layer's weights costs about 45 ms)."""
        return self.left_out.give_back(self.typed) if self.left_out is not None else self.typed

    def self_contained(self) -> bytes:
        """The file's model as bytes any reader can load alone: ``raw`` itself, or, where it keeps
        weights in external files, the same model with that data inlined (ONNX Runtime given bytes
        cannot find files; a copy written elsewhere would point nowhere)."""
        if not self.external:
            return self.raw
        return _parse(self.path, self.raw)[0].SerializeToString()  # onnx marks loaded tensors as inline


def default_opset(model: onnx.ModelProto | onnx.FunctionProto) -> int:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return opset.version
    return 0


_FIXED_DIMS: contextvars.ContextVar[Mapping[str, int]] = contextvars.ContextVar("hexfuse_fixed_dims", default={})


@contextlib.contextmanager
def fixed_dims(values: Mapping[str, int]) -> Iterator[None]:
    """Pin symbolic dimensions (name -> size) in every model ``load_model`` reads inside the block."""
    token = _FIXED_DIMS.set(dict(values))
    try:
        yield
    finally:
        _FIXED_DIMS.reset(token)


def parse_fix_dim(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` (VALUE a positive integer), as ``--fix-dim`` takes it."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip().isdecimal() or int(value) < 1:
        raise HexfuseError(f"--fix-dim {text!r}: expected NAME=VALUE with a positive integer VALUE (e.g. N=1)")
    if int(value) > MAX_DIM:
        raise HexfuseError(f"--fix-dim {text!r}: VALUE must be at most {MAX_DIM}")
    return name.strip(), int(value)


def parse_fix_dims(texts: Iterable[str]) -> dict[str, int]:
    """Every ``--fix-dim NAME=VALUE`` as name -> size; one name given two sizes is refused."""
    pins: dict[str, int] = {}
    for text in texts:
        name, value = parse_fix_dim(text)
        if pins.get(name, value) != value:
            raise HexfuseError(f"--fix-dim {name}: given two values, {pins[name]} and {value}")
        pins[name] = value
    return pins


def _value_infos(graph: onnx.GraphProto):
    return (*graph.input, *graph.output, *graph.value_info)


def symbolic_dims(graph: onnx.GraphProto) -> dict[str, list[str]]:
    """Each symbolic dimension of the graph's inputs and outputs -> where it sits (``x[0]``), in order;
    an unnamed dynamic dimension is listed as ``?``."""
    found: dict[str, list[str]] = {}
    for info in (*graph.input, *graph.output):
        if not info.type.HasField("tensor_type") or not info.type.tensor_type.HasField("shape"):
            continue
        for axis, dim in enumerate(info.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                found.setdefault(dim.dim_param or "?", []).append(f"{info.name}[{axis}]")
    return found


def pin_arguments(graph: onnx.GraphProto) -> list[str]:
    """The ``--fix-dim`` arguments that pin every dynamic dimension of the graph's inputs (shape inference
    then sizes the outputs): ``NAME=VALUE`` for a named dim, ``INPUT[AXIS]=VALUE`` for an unnamed one."""
    pins: list[str] = []
    initializers = {t.name for t in graph.initializer}
    for info in graph.input:
        if info.name in initializers or not info.type.HasField("tensor_type") \
                or not info.type.tensor_type.HasField("shape"):
            continue
        for axis, dim in enumerate(info.type.tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                continue
            pin = f"{dim.dim_param}=VALUE" if dim.dim_param else f"{info.name}[{axis}]=VALUE"
            if pin not in pins:
                pins.append(pin)
    return pins


_POSITION = re.compile(r"^(?P<input>.+)\[(?P<axis>\d+)\]$")  # --fix-dim INPUT[AXIS]=VALUE


def _fix_dims(path: Path, model: onnx.ModelProto, values: Mapping[str, int]) -> None:
    """ONNX Runtime's make_dynamic_shape_fixed, in place: every dim_param in ``values`` becomes its size;
    ``INPUT[AXIS]`` pins that dimension of a graph input, named or not."""
    named = {dim.dim_param for info in _value_infos(model.graph) if info.type.HasField("tensor_type")
             for dim in info.type.tensor_type.shape.dim if dim.HasField("dim_param")}
    inputs = {info.name: info for info in model.graph.input}
    for name, value in values.items():
        if name in named:
            continue
        position = _POSITION.match(name)
        info = inputs.get(position["input"]) if position else None
        if info is not None and info.type.HasField("tensor_type"):
            dims = info.type.tensor_type.shape.dim
            axis = int(position["axis"])
            if axis >= len(dims):
                raise HexfuseError(f"{path}: --fix-dim {name}: input {position['input']!r} has rank {len(dims)}")
            if not dims[axis].HasField("dim_value"):
                dims[axis].dim_value = value  # a oneof: clears dim_param
            elif dims[axis].dim_value != value:
                raise HexfuseError(f"{path}: --fix-dim {name}: that dimension is {dims[axis].dim_value} already")
            continue
        known = ", ".join(sorted(named)) or "none"
        raise HexfuseError(f"{path}: --fix-dim {name}: no dimension is named {name!r} (symbolic dims: {known}); "
                           "an unnamed one is pinned by its place on an input, INPUT[AXIS]=VALUE")
    for info in _value_infos(model.graph):
        if not info.type.HasField("tensor_type"):
            continue
        for dim in info.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in values:
                dim.dim_value = values[dim.dim_param]  # a oneof: clears dim_param


def _read(path: Path) -> bytes:
    if not path.exists():
        raise HexfuseError(f"{path}: no such file")
    if path.is_dir():
        raise HexfuseError(f"{path}: is a directory, expected an .onnx file")
    if not path.is_file():  # /dev/zero, a FIFO, a socket: read until memory runs out, or forever
        raise HexfuseError(f"{path}: not a regular file, expected an .onnx file")
    if path.stat().st_size > PROTOBUF_LIMIT:
        raise HexfuseError(f"{path}: {path.stat().st_size / 2**30:.2f} GiB, over protobuf's 2 GiB limit for one "
                           "model file (keep the weights in external data)")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise HexfuseError(f"{path}: cannot read: {exc.strerror}") from None


def _external_files(path: Path, model: onnx.ModelProto) -> tuple[Path, ...]:
    files: dict[Path, None] = {}
    for tensor in external_data_helper._get_all_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((entry.value for entry in tensor.external_data if entry.key == "location"), "")
            if location:
                files[(path.parent / location).resolve()] = None
    return tuple(files)


def _external_bytes(path: Path, model: onnx.ModelProto) -> int:
    """The bytes the external data would add once loaded, from the tensors' lengths and the files'
    sizes (nothing is read): a tensor without a length takes its file from its offset to the end."""
    total = 0
    for tensor in external_data_helper._get_all_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {entry.key: entry.value for entry in tensor.external_data}
        if entries.get("length", "").isdigit():
            total += int(entries["length"])
            continue
        try:
            size = (path.parent / entries.get("location", "")).stat().st_size
        except OSError:
            continue  # onnx names the missing file when it loads
        offset = int(entries["offset"]) if entries.get("offset", "").isdigit() else 0
        total += max(0, size - offset)
    return total


_BYTES_PER_NODE_TO_WALK = 4096  # above, asking the tensors is cheaper than searching the bytes (break-even ~1.8 KB)


def _may_use_external_data(raw: bytes, model: onnx.ModelProto) -> bool:
    """Whether a tensor of the model may keep its data in a file of its own. Every such tensor names its
    file under the key "location": without that string in the file there is nothing to load. Searching
    the bytes costs 0.7 ns a byte (68 ms of a 100 MB layer), asking every tensor 1.2 us a node (37 ms
    at 31k nodes): the cheaper of the two, by bytes per node."""
    if len(raw) > _BYTES_PER_NODE_TO_WALK * max(1, len(model.graph.node)):
        # the tensors onnx.load_external_data_for_model loads (where none is external, it changes nothing)
        return any(tensor.data_location == onnx.TensorProto.EXTERNAL
                   for tensor in external_data_helper._get_all_tensors(model))
    return b"location" in raw


def _parse(path: Path, raw: bytes) -> tuple[onnx.ModelProto, tuple[Path, ...]]:
    """The model with its external data loaded, and the external-data files it read."""
    model = onnx.ModelProto()
    try:
        model.ParseFromString(raw)
    except (DecodeError, RuntimeWarning, ValueError):
        raise HexfuseError(f"{path}: not an ONNX model (protobuf parse failed; truncated or another format?)") from None
    # Arbitrary bytes sometimes parse as a protobuf with unknown fields only.
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise HexfuseError(f"{path}: not an ONNX model (no ir_version, graph or opset_import)")
    external: tuple[Path, ...] = ()
    if _may_use_external_data(raw, model):
        external = _external_files(path, model)
        loaded_bytes = len(raw) + _external_bytes(path, model)
        if loaded_bytes > PROTOBUF_LIMIT:  # refused from sizes: loading it would fail in protobuf (EncodeError)
            raise HexfuseError(f"{path}: model with its external data is {loaded_bytes / 2**30:.2f} GiB, over "
                               "protobuf's 2 GiB limit; models this large are not supported yet")
        try:
            onnx.load_external_data_for_model(model, str(path.parent))
        except (OSError, ValueError, onnx.checker.ValidationError) as exc:
            raise HexfuseError(f"{path}: cannot load external data: {_first_line(exc)}") from None
    return model, external


def strict_inference(model: onnx.ModelProto | bytes) -> onnx.ModelProto:
    """onnx's shape inference as the load runs it first: types checked, errors raised, data propagated."""
    return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)


def _infer_shapes(path: Path, model: onnx.ModelProto | bytes) -> onnx.ModelProto:
    """Shapes with data propagation (Reshape targets computed from Shape ops); where only the data
    propagation fails, without it. (onnx's data propagation refuses a model whose sibling subgraphs
    each define one local name, "Data for input 0 already exists", which the checker and ONNX Runtime
    accept; fewer shapes are known then, never a wrong one.)"""
    try:
        return strict_inference(model)
    except Exception as exc:  # InferenceError and C++ errors surface under several types
        first = exc
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=False)
    except Exception:
        raise HexfuseError(f"{path}: shape inference failed: {_first_line(first)}") from None


def _upgrade(path: Path, model: onnx.ModelProto) -> tuple[onnx.ModelProto, int | None, list[int] | None]:
    """(model at >= MIN_OPSET, the opset it had if upgraded, file index per node if upgraded)."""
    opset = default_opset(model)
    if opset == 0:
        raise HexfuseError(f"{path}: no default-domain opset import")
    if opset > MAX_OPSET:
        raise HexfuseError(f"{path}: opset {opset} is newer than the newest supported ({MAX_OPSET})")
    if opset >= MIN_OPSET:
        return model, None, None
    # The converter keeps node names and leaves the nodes it adds unnamed: a temporary name per node
    # carries its file index through; the real names are put back (byte-identical to an untagged run).
    tagged = onnx.ModelProto()
    tagged.CopyFrom(model)
    for index, node in enumerate(tagged.graph.node):
        node.name = f"{_TAG}{index}"
    try:
        upgraded = version_converter.convert_version(tagged, MIN_OPSET)
    except Exception as exc:  # the converter raises bare RuntimeError/ValueError/IndexError from C++
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HexfuseError(f"{path}: opset {opset} is unsupported and could not be upgraded to {MIN_OPSET}: {reason}") from None
    # The converter drops the model-local functions and cannot convert them: they come back unchanged
    # where they import no default-domain opset of their own (else the checker would refuse the model).
    stale = [f"{f.domain}:{f.name}" for f in model.functions if default_opset(f) not in (0, MIN_OPSET)]
    if stale:
        raise HexfuseError(f"{path}: opset {opset} is unsupported and its model-local functions ({', '.join(stale)}) "
                           f"cannot be upgraded to {MIN_OPSET} with it: export the model at opset {MIN_OPSET} or newer")
    upgraded.functions.extend(model.functions)
    origin = []
    for node in upgraded.graph.node:
        index = node.name[len(_TAG):] if node.name.startswith(_TAG) else ""
        if index.isdigit() and int(index) < len(model.graph.node):
            source = model.graph.node[int(index)]
            origin.append(int(index))
            if source.HasField("name"):
                node.name = source.name
            else:
                node.ClearField("name")
        else:
            origin.append(-1)
            if node.name.startswith(_TAG):
                node.ClearField("name")
    return upgraded, opset, origin


def _sorted(path: Path, model: onnx.ModelProto, reads: list[list[str]],
            writes: list[list[str]]) -> tuple[onnx.ModelProto, list[int] | None]:
    """The model with its nodes in topological order and the order taken (None if unchanged); refuse
    cycles. ``reads`` / ``writes``: each node's ``node_reads`` and outputs."""
    graph = model.graph
    order = topological_order(graph, reads, writes)  # raises on a cycle
    if order == list(range(len(graph.node))):
        return model, None
    nodes = list(graph.node)  # (indexing the repeated field builds a wrapper per access)
    nodes = [nodes[i] for i in order]
    sorted_model = onnx.ModelProto()
    sorted_model.CopyFrom(model)
    del sorted_model.graph.node[:]
    sorted_model.graph.node.extend(nodes)
    return sorted_model, order


def _check_defined(graph: onnx.GraphProto, reads: list[list[str]], writes: list[list[str]]) -> None:
    """Name the first tensor nobody defines (the checker's own message blames the sort order);
    subgraphs' reads of the outer scope count (``reads`` / ``writes``: each node's ``node_reads``,
    subgraphs.py, and outputs)."""
    defined = {info.name for info in graph.input} | {init.name for init in graph.initializer}
    defined.update(init.values.name for init in graph.sparse_initializer)
    defined.update(chain.from_iterable(writes))
    for index, names in enumerate(reads):
        for name in names:
            if name and name not in defined:
                node = graph.node[index]
                raise HexfuseError(f"node {node.name or node.op_type!r} reads {name!r}, which no node, input or initializer defines")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_model(path: str | Path, fix: Mapping[str, int] | None = None) -> LoadedModel:
    """``fix``: symbolic dimensions to pin (name -> size); default: those ``fixed_dims`` set."""
    if isinstance(path, str) and not path:  # Path("") is "."
        raise HexfuseError("empty model path")
    path = Path(path)
    fix = _FIXED_DIMS.get() if fix is None else fix
    raw = _read(path)
    model, external = _parse(path, raw)
    densified = densify_sparse_initializers(path, model)
    if fix:
        _fix_dims(path, model, fix)
    if not external and not densified and not fix:
        size = len(raw)  # the model is the file's bytes: the same bound, without walking the message
    else:
        try:
            size = model.ByteSize()
        except Exception:  # protobuf's EncodeError on a message over its limit
            size = PROTOBUF_LIMIT + 1
    if size > PROTOBUF_LIMIT:
        raise HexfuseError(
            f"{path}: model with its external data is {size / 2**30:.2f} GiB, over protobuf's 2 GiB "
            "limit; models this large are not supported yet"
        )
    file_graph = model.graph
    model, upgraded_from, origin = _upgrade(path, model)
    # The file's own bytes where they are the model (no external data, no upgrade): the checker and
    # shape inference parse bytes in C++ anyway, and serializing the model again costs as much.
    exact = raw if upgraded_from is None and not external and not densified and not fix else None
    start = time.process_time()
    try:
        onnx.checker.check_model(exact or model)
    except (onnx.checker.ValidationError, ValueError) as exc:
        # Undefined tensors and unsorted graphs fail the checker too: word the first, sort the second.
        nodes = list(model.graph.node)  # (each walk over the repeated field wraps every node again)
        reads, writes = [node_reads(node) for node in nodes], [list(node.output) for node in nodes]
        try:
            _check_defined(model.graph, reads, writes)
            model, order = _sorted(path, model, reads, writes)
        except HexfuseError as inner:
            raise HexfuseError(f"{path}: {inner}") from None
        if order is None:
            raise HexfuseError(f"{path}: invalid ONNX graph: {_first_line(exc)}") from None
        origin = [origin[i] for i in order] if origin is not None else order
        exact = model.SerializeToString()  # once, for the checker and shape inference
        try:
            onnx.checker.check_model(exact)
        except (onnx.checker.ValidationError, ValueError) as again:
            raise HexfuseError(f"{path}: invalid ONNX graph: {_first_line(again)}") from None
    light = lighten(model, size, strict_inference)
    typed, left_out = light if light is not None else (_infer_shapes(path, exact or model), None)
    onnx_seconds = time.process_time() - start
    return LoadedModel(path, raw, hashlib.sha256(raw).hexdigest(), model, typed, upgraded_from, file_graph,
                       tuple(origin) if origin is not None else None, external, densified, tuple(sorted(fix.items())),
                       onnx_seconds, left_out)
