"""Read a fusion spec's JSON strictly: every field of the type model.py declares, or one error line.

The spec is a file a user (or anyone) can edit, and everything in it flows into generated C++,
XML, a Makefile and a README. So nothing is taken on trust: names are strings, shapes non-negative
int64s, quantization scales finite, op types C identifiers, and each attribute of an ONNX op has
the type ONNX's schema gives it (an INTS ``perm`` is a list of ints, never of strings that a code
generator could print raw). A value of the wrong type is refused here with the path to it,
instead of surfacing later as a TypeError deep inside the generator.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Callable

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import (
    SCHEMA_VERSION, AttributeValue, FusedOp, FusionSpec, NodeSpec, QuantSpec, TaskSpec, TensorSpec,
)

_REQUIRED = object()
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DTYPE = re.compile(r"[a-z][a-z0-9_]{0,31}")
_SHA256 = re.compile(r"(?:[0-9a-f]{64})?")  # "" in a spec not written beside a model
ENGINES = ("matrix", "vector", "dma")
MAX_DIM = 2**63 - 1


class Malformed(HexfuseError):
    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"fusion spec is malformed at {where}: {why}")


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _field(raw: Any, key: str, where: str, default: Any = _REQUIRED) -> Any:
    if not isinstance(raw, dict):
        raise Malformed(where, f"expected an object, got {_type_name(raw)}")
    if key in raw:
        return raw[key]
    if default is _REQUIRED:
        raise Malformed(f"{where}.{key}", "missing")
    return default


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise Malformed(where, f"expected a string, got {_type_name(value)}")
    return value


def _int(value: Any, where: str, low: int = 0, high: int = MAX_DIM) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(where, f"expected an integer, got {_type_name(value)}")
    if not low <= value <= high:
        raise Malformed(where, f"{value} is outside [{low}, {high}]")
    return value


def _float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Malformed(where, f"expected a finite number, got {value!r}" if isinstance(value, float)
                        else f"expected a number, got {_type_name(value)}")
    return float(value)


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise Malformed(where, f"expected true or false, got {_type_name(value)}")
    return value


def _match(value: Any, where: str, pattern: re.Pattern[str], what: str) -> str:
    if not pattern.fullmatch(_str(value, where)):
        raise Malformed(where, f"{value!r} is not {what}")
    return value


def _list(value: Any, where: str, item: Callable[[Any, str], Any], least: int = 0) -> tuple:
    if not isinstance(value, list):
        raise Malformed(where, f"expected a list, got {_type_name(value)}")
    if len(value) < least:
        raise Malformed(where, f"expected at least {least} entries, got {len(value)}")
    return tuple(item(v, f"{where}[{i}]") for i, v in enumerate(value))


# -- attributes ------------------------------------------------------------------------------------
# AttributeProto types (onnx.AttributeProto.AttributeType) and what a spec may hold for each.
_FLOAT, _INT, _STRING, _TENSOR, _FLOATS, _INTS, _STRINGS = 1, 2, 3, 4, 6, 7, 8


def _attribute_kind(value: Any) -> set[int]:
    """The AttributeProto types a JSON value can stand for (spec_builder writes tensors as numbers)."""
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {_INT, _FLOAT, _TENSOR}
    if isinstance(value, float):
        return {_FLOAT, _TENSOR} if math.isfinite(value) else set()
    if isinstance(value, str):
        return {_STRING, _TENSOR}
    if isinstance(value, list):
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return {_INTS, _FLOATS, _STRINGS, _TENSOR} if not value else {_INTS, _FLOATS, _TENSOR}
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
            return {_FLOATS, _TENSOR}
        if all(isinstance(v, str) for v in value):
            return {_STRINGS}
    return set()


@functools.lru_cache(maxsize=None)
def _schema_attributes(op_type: str) -> dict[str, frozenset[int]] | None:
    """Attribute name -> the types ONNX gave it in any opset of the default domain; None: not an ONNX op."""
    import onnx.defs  # the schema table, not ONNX objects

    found: dict[str, set[int]] = {}
    version = onnx.defs.onnx_opset_version()
    known = False
    while version > 0:
        try:
            schema = onnx.defs.get_schema(op_type, version, "")
        except onnx.defs.SchemaError:
            break
        known = True
        for name, attribute in schema.attributes.items():
            found.setdefault(name, set()).add(int(attribute.type))
        version = schema.since_version - 1
    return {name: frozenset(types) for name, types in found.items()} if known else None


def _attributes(raw: Any, op_type: str, domain: str, where: str) -> dict[str, AttributeValue]:
    if not isinstance(raw, dict):
        raise Malformed(where, f"expected an object, got {_type_name(raw)}")
    schema = _schema_attributes(op_type) if domain in ("", "ai.onnx") else None
    attributes: dict[str, AttributeValue] = {}
    for name, value in raw.items():
        here = f"{where}.{name}"
        kinds = _attribute_kind(value)
        if not kinds:
            raise Malformed(here, "expected a number, a string or a list of one of them")
        if schema is not None:
            if name not in schema:
                raise Malformed(here, f"{op_type} has no attribute {name!r} in any ONNX opset")
            if not kinds & schema[name]:
                raise Malformed(here, f"{value!r} has the wrong type for {op_type}.{name}")
        attributes[name] = tuple(value) if isinstance(value, list) else value
    return attributes


# -- objects ---------------------------------------------------------------------------------------
def _quant(raw: Any, where: str) -> QuantSpec | None:
    if raw is None:
        return None
    axis = _field(raw, "axis", where, None)
    return QuantSpec(_match(_field(raw, "dtype", where), f"{where}.dtype", _DTYPE, "a dtype name"),
                     _list(_field(raw, "scale", where), f"{where}.scale", _float),
                     _list(_field(raw, "zero_point", where), f"{where}.zero_point",
                           lambda v, w: _int(v, w, -2**63, MAX_DIM)),
                     None if axis is None else _int(axis, f"{where}.axis", -64, 64))


def _tensor(raw: Any, where: str) -> TensorSpec:
    return TensorSpec(
        _str(_field(raw, "name", where), f"{where}.name"),
        _match(_field(raw, "dtype", where), f"{where}.dtype", _DTYPE, "a dtype name"),
        _list(_field(raw, "shape", where), f"{where}.shape", _int),
        _bool(_field(raw, "static", where), f"{where}.static"),
        _quant(_field(raw, "quant", where), f"{where}.quant"),
        _quant(_field(raw, "wire", where, None), f"{where}.wire"),  # schema < 3: no port folded a boundary DQ/Q
    )


def _node(raw: Any, where: str) -> NodeSpec:
    op_type = _str(_field(raw, "op_type", where), f"{where}.op_type")
    domain = _str(_field(raw, "domain", where), f"{where}.domain")
    return NodeSpec(_str(_field(raw, "name", where), f"{where}.name"), op_type, domain,
                    _list(_field(raw, "inputs", where), f"{where}.inputs", _str),
                    _list(_field(raw, "outputs", where), f"{where}.outputs", _str),
                    _attributes(_field(raw, "attributes", where), op_type, domain, f"{where}.attributes"))


def _task(raw: Any, where: str) -> TaskSpec:
    engine = _str(_field(raw, "engine", where), f"{where}.engine")
    if engine not in ENGINES:
        raise Malformed(f"{where}.engine", f"{engine!r} is not one of {', '.join(ENGINES)}")
    return TaskSpec(
        _str(_field(raw, "id", where), f"{where}.id"), engine,
        _list(_field(raw, "nodes", where), f"{where}.nodes", _node, least=1),
        _list(_field(raw, "inputs", where), f"{where}.inputs", _str),
        _list(_field(raw, "outputs", where), f"{where}.outputs", _str),
        *(_int(_field(raw, key, where), f"{where}.{key}", 0, 2**127) for key in ("macs", "elements", "bytes_moved")),
    )


def _fused_op(raw: Any, where: str) -> FusedOp:
    node_name = _str(_field(raw, "node_name", where), f"{where}.node_name")
    instances = _list(_field(raw, "instances", where, []), f"{where}.instances", _str) or (node_name,)  # schema 1
    return FusedOp(
        _match(_field(raw, "op_type", where), f"{where}.op_type", _IDENTIFIER, "a C identifier"), node_name,
        _list(_field(raw, "inputs", where), f"{where}.inputs", _tensor),
        _list(_field(raw, "outputs", where), f"{where}.outputs", _tensor, least=1),
        _list(_field(raw, "tasks", where), f"{where}.tasks", _task, least=1),
        _list(_field(raw, "tensors", where), f"{where}.tensors", _tensor),
        _str(_field(raw, "rule", where), f"{where}.rule"),
        _float(_field(raw, "predicted_gain", where), f"{where}.predicted_gain"),
        _str(_field(raw, "source", where, "branch"), f"{where}.source"),  # older specs: branch groups only
        instances,
    )


def spec_from_dict(raw: dict[str, Any], version: int) -> FusionSpec:
    """The spec in ``raw`` (already known to be of a readable ``version``), read as the current version."""
    ops = _list(_field(raw, "fused_ops", "spec"), "spec.fused_ops", _fused_op)
    seen_types: set[str] = set()
    seen_nodes: set[str] = set()
    for index, op in enumerate(ops):
        if op.op_type in seen_types:
            raise Malformed(f"spec.fused_ops[{index}].op_type", f"{op.op_type!r} appears twice")
        seen_types.add(op.op_type)
        for name in op.instances:
            if name in seen_nodes:
                raise Malformed(f"spec.fused_ops[{index}].instances", f"fused node {name!r} appears twice")
            seen_nodes.add(name)
    model_hash = _field(raw, "model_sha256", "spec", "" if version < 4 else _REQUIRED)
    return FusionSpec(
        _str(_field(raw, "model", "spec"), "spec.model"),
        _str(_field(raw, "source_sha256", "spec"), "spec.source_sha256"),
        _str(_field(raw, "target", "spec"), "spec.target"),
        ops, SCHEMA_VERSION, _str(_field(raw, "domain", "spec"), "spec.domain"),
        _match(model_hash, "spec.model_sha256", _SHA256, "a sha256 hex digest"),
    )
