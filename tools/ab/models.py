"""Load and check the two models, find the fused nodes, write serial/concurrent variants."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from hexfuse.graph_passes.errors import HexfuseError

FUSED_DOMAIN = "hexfuse"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    elem_type: int
    shape: tuple  # ints, or strings for symbolic dims, or None for unknown
    ids_below: int = field(default=8, compare=False)  # seeded integers stay below it (rows of the Gather table it indexes)

    def describe(self) -> str:
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.name}:{onnx.TensorProto.DataType.Name(self.elem_type).lower()}[{dims}]"


def load_model(path: str | os.PathLike) -> onnx.ModelProto:
    p = Path(path)
    if not p.is_file():
        raise HexfuseError(f"model file not found: {p}")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError, OSError) as e:
        raise HexfuseError(f"{p} is not an ONNX model ({type(e).__name__})") from None
    if not model.graph.node and not model.graph.output:
        # protobuf parses many non-ONNX byte strings into an empty message
        raise HexfuseError(f"{p} is not an ONNX model (empty graph)")
    return model


def _spec(vi: onnx.ValueInfoProto) -> TensorSpec:
    tt = vi.type.tensor_type
    dims: list = []
    for d in tt.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    return TensorSpec(vi.name, tt.elem_type, tuple(dims))


def graph_inputs(model: onnx.ModelProto) -> list[TensorSpec]:
    from hexfuse.graph_passes.rewrite.ort_check import index_limits

    inits = {i.name for i in model.graph.initializer}
    limits = index_limits(model)
    return [replace(_spec(v), ids_below=limits.get(v.name, 8)) for v in model.graph.input if v.name not in inits]


def graph_outputs(model: onnx.ModelProto) -> list[TensorSpec]:
    return [_spec(v) for v in model.graph.output]


def check_compatible(orig: onnx.ModelProto, fused: onnx.ModelProto, orig_path: str, fused_path: str) -> None:
    """Both models must take and give the same named tensors, else the A/B compares nothing."""
    for kind, a, b in (("input", graph_inputs(orig), graph_inputs(fused)),
                       ("output", graph_outputs(orig), graph_outputs(fused))):
        an, bn = {s.name: s for s in a}, {s.name: s for s in b}
        if set(an) != set(bn):
            only_a = sorted(set(an) - set(bn))
            only_b = sorted(set(bn) - set(an))
            raise HexfuseError(f"models differ in {kind} names: only in {orig_path}: {only_a}, "
                               f"only in {fused_path}: {only_b}")
        for name, sa in an.items():
            sb = bn[name]
            if sa.elem_type != sb.elem_type or sa.shape != sb.shape:
                raise HexfuseError(f"models differ in {kind} '{name}': {sa.describe()} vs {sb.describe()}")


def fused_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Top-level nodes that call a model-local function of the hexfuse domain."""
    local = {(f.domain, f.name) for f in model.functions}
    return [n for n in model.graph.node if n.domain == FUSED_DOMAIN and (n.domain, n.op_type) in local]


def fused_op_types(model: onnx.ModelProto) -> list[str]:
    return sorted({n.op_type for n in fused_nodes(model)})


def write_serial_variant(model_path: str, serial: int, out_path: Path, drop_functions: bool = False) -> Path:
    """Copy of the fused model with `serial` set on every fused node (1 = internal-serial barrier mode).

    drop_functions: remove the hexfuse functions, so ORT can only run a fused node through a registered
    custom op (no silent inlining; a missing op is a session error)."""
    model = onnx.load(model_path)  # with external data, so the copy is self-contained
    nodes = fused_nodes(model)
    if not nodes:
        raise HexfuseError(f"{model_path} has no fused ({FUSED_DOMAIN}) node to switch to serial={serial}")
    for node in nodes:
        kept = [a for a in node.attribute if a.name != "serial"]
        del node.attribute[:]
        node.attribute.extend(kept)
        node.attribute.append(onnx.helper.make_attribute("serial", int(serial)))
    if drop_functions:
        kept_functions = [f for f in model.functions if f.domain != FUSED_DOMAIN]
        del model.functions[:]
        model.functions.extend(kept_functions)
    big = model.ByteSize() > 1_500_000_000
    tmp = out_path.with_suffix(".tmp.onnx")
    onnx.save(model, str(tmp), save_as_external_data=big,
              location=out_path.name + ".data" if big else None)
    os.replace(tmp, out_path)
    return out_path


def node_key(node: onnx.NodeProto, index: int) -> list[str]:
    """Names under which ORT/QNN profiles may report a node (ORT names unnamed nodes itself)."""
    if node.name:
        return [node.name]
    return [f"{node.op_type}{index}", f"{node.op_type}_{index}"]
