"""The fusion spec: the contract between the graph pass and the op package generator.

``hexfuse fuse`` writes one ``FusionSpec`` as JSON next to the fused model. It describes every fused
node completely enough to generate its kernel without reading ONNX: the fused node's inputs and
outputs in ONNX order, and per task the original nodes (op type, attributes, tensor names) in a valid
execution order, each tensor with its dtype, static shape and quantization parameters.

    FusionSpec
      └── FusedOp (one per op type, domain "hexfuse"; ``instances`` names every fused node calling it)
            ├── inputs / outputs: TensorSpec (ONNX order of the fused node)
            └── tasks: TaskSpec (engine matrix | vector | dma)
                  └── nodes: NodeSpec (topologically ordered)

Fused groups identical up to renaming share one op type: the FusedOp describes the first of them
(its tensor and node names), and every instance passes its own tensors in the same positions.

Everything is a frozen dataclass; ``to_json``/``from_json`` round-trip exactly, and ``from_json``
reads strictly (read.py: every field typed, attributes as ONNX types them). Bump
``SCHEMA_VERSION`` on any incompatible change. Version 2 added ``FusedOp.instances``; version 3 put
the boundary DQ/Q of quantized groups outside the fused node (``TensorSpec.wire``); version 4 added
``model_sha256``, the hash of the fused model file the spec describes, which `hexfuse oppkg` checks
so that a model and a spec of two different runs never build a package together. Older specs still
load: ``instances = (node_name,)``, no wire encodings, no model hash (``""``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from hexfuse.graph_passes.errors import HexfuseError

SCHEMA_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
FUSED_DOMAIN = "hexfuse"
SERIAL_ATTRIBUTE = "serial"  # int attribute on every fused node: 1 = internal-serial (barrier) mode

AttributeValue = int | float | str | tuple[int, ...] | tuple[float, ...] | tuple[str, ...]


@dataclass(frozen=True)
class QuantSpec:
    """Linear quantization of a tensor: real = (q - zero_point) * scale; per-axis when ``axis`` is set."""

    dtype: str  # storage type of the quantized tensor, e.g. "uint8", "int8", "uint16"
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # numpy name: "float32", "uint8", "int64", ...
    shape: tuple[int, ...]
    static: bool = False  # constant once folded (flat.folds_to_constant): QNN hands it over as a STATIC tensor
    quant: QuantSpec | None = None  # set where the tensor is the quantized side of a Q/DQ pair
    # Fused-op ports only: the float port is fed by a DQ (or read by a Q) left outside the fused node;
    # on the QNN EP that DQ/Q folds into the port, so the kernel sees this quantized encoding.
    wire: QuantSpec | None = None


@dataclass(frozen=True)
class NodeSpec:
    name: str  # the original node's name (unique in the model; empty names are filled by the pass)
    op_type: str
    domain: str
    inputs: tuple[str, ...]  # "" marks an omitted optional input, as in ONNX
    outputs: tuple[str, ...]
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskSpec:
    """A connected region of nodes that runs on one engine."""

    id: str
    engine: str  # "matrix" | "vector" | "dma"
    nodes: tuple[NodeSpec, ...]
    inputs: tuple[str, ...]  # tensors read from outside the task
    outputs: tuple[str, ...]  # tensors the task produces that are read outside it
    macs: int = 0  # multiply-accumulates of matrix ops
    elements: int = 0  # output elements of vector ops
    bytes_moved: int = 0  # bytes read + written by the task's nodes


@dataclass(frozen=True)
class FusedOp:
    op_type: str  # one per distinct group structure; never an ONNX op name
    node_name: str  # the fused node this spec was built from (the first instance)
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    tasks: tuple[TaskSpec, ...]
    tensors: tuple[TensorSpec, ...]  # every tensor inside the group (inputs, intermediates, outputs)
    rule: str = "horizontal"  # what made this fused node
    predicted_gain: float = 0.0  # fraction of the serial time the selection predicted to save
    source: str = "branch"  # where its tasks came from: "branch" | "micro-batch" | "request" (graph_passes.analysis.sources)
    instances: tuple[str, ...] = ()  # every fused node calling this op type, first instance first (schema 2)

    def tensor(self, name: str) -> TensorSpec:
        for tensor in self.tensors:
            if tensor.name == name:
                return tensor
        raise HexfuseError(f"fused op {self.op_type}: no tensor named {name!r} in the spec")

    @property
    def entry_carrier(self) -> int | None:
        """The input (index) the HTP expansion's entry copies into the matrix work: the first non-constant
        input of the first matrix task (op_package/htp_expand.py; the replay prices its bytes). None: none."""
        index = {t.name: i for i, t in enumerate(self.inputs)}
        matrix = next((task for task in self.tasks if task.engine == "matrix"), None)
        return next((index[n] for n in (matrix.inputs if matrix else ()) if not self.inputs[index[n]].static), None)


@dataclass(frozen=True)
class FusionSpec:
    model: str  # file name of the fused model this spec describes
    source_sha256: str  # hash of the original model file
    target: str
    fused_ops: tuple[FusedOp, ...]
    schema_version: int = SCHEMA_VERSION
    domain: str = FUSED_DOMAIN
    model_sha256: str = ""  # hash of the fused model file (schema 4); "" in older specs and before writing

    def to_json(self) -> str:
        # Compact, by the C encoder: indenting a spec of thousands of nodes cost seconds.
        return json.dumps(_plain(self), sort_keys=True, separators=(",", ":")) + "\n"

    @staticmethod
    def from_json(text: str) -> FusionSpec:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise HexfuseError(f"fusion spec is not valid JSON: {exc}") from None
        except RecursionError:
            raise HexfuseError("fusion spec is not valid JSON: nested too deeply") from None
        version = raw.get("schema_version") if isinstance(raw, dict) else None
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise HexfuseError(
                f"fusion spec schema_version {version!r} is not supported (expected one of {READABLE_VERSIONS})"
            )
        from hexfuse.graph_passes.spec.read import spec_from_dict  # builds on the dataclasses here

        return spec_from_dict(raw, version)


def _plain(value: Any) -> Any:
    """Dataclasses -> dicts, tuples -> lists (what json.dumps writes), without asdict's deep copies."""
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def structure_key(task: TaskSpec, tensor: Callable[[str], TensorSpec | None]) -> tuple:
    """What a task computes, without its names: engine, ops, attributes and tensor types.

    Equal keys mean equal costs, so repeated structure (the layers of an LM) is scored once."""

    def signature(name: str) -> tuple | None:
        spec = tensor(name)
        return None if spec is None else (spec.shape, spec.dtype, spec.static, spec.quant is not None)

    nodes = tuple(
        (n.op_type, n.domain, tuple(sorted(n.attributes.items())), tuple(map(signature, n.inputs)),
         tuple(map(signature, n.outputs)))
        for n in task.nodes
    )
    return (task.engine, nodes, tuple(map(signature, task.inputs)), tuple(map(signature, task.outputs)))


def load_spec(path: str) -> FusionSpec:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise HexfuseError(f"cannot read fusion spec {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise HexfuseError(f"fusion spec {path} is not UTF-8 text") from None
    try:
        return FusionSpec.from_json(text)
    except HexfuseError as exc:
        raise HexfuseError(f"{path}: {exc}") from None
