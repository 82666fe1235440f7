"""Tiny QDQ models (codes in -> DequantizeLinear -> op -> QuantizeLinear -> codes out) run by ONNX Runtime and
as fused ops of one host-built package: the helpers of test_qvector.py.

A case lists its nodes with plain names; encodings are initializers named "<tensor>.s" / "<tensor>.z"
(see ``dq`` / ``q``), so the spec's QuantSpec of each code tensor comes from the same values ORT reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from hexfuse.graph_passes.spec.builder import node_spec
from hexfuse.graph_passes.spec.model import FusedOp, FusionSpec, NodeSpec, QuantSpec, TaskSpec, TensorSpec
from hexfuse.op_package.build import build_host
from hexfuse.op_package.host import HostPackage
from hexfuse.op_package.render import render_package
from hexfuse.op_package.writer import write_tree

OPSET = 21
LEVELS = {"float": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,  # DQ, float op, Q: the ONNX definition
          "fused": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}   # ORT's own QDQ fusions (QLinear* kernels)


@dataclass
class Case:
    name: str
    nodes: list[onnx.NodeProto]
    inputs: dict[str, np.ndarray]  # graph inputs (codes)
    inits: dict[str, np.ndarray]   # initializers: encodings, shapes, axes
    outputs: list[str]
    exact: bool = False  # ours must equal ORT's float chain bit for bit (ops exact in float32)
    opset: int = OPSET
    values: dict[str, np.ndarray] = field(default_factory=dict)  # ORT "float" run: every tensor
    refs: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # level -> outputs

    @property
    def op_type(self) -> str:
        return "HexFuse_q_" + "".join(c if c.isalnum() else "_" for c in self.name)


def enc(dtype: str, scale: float, zero: int) -> tuple[str, float, int]:
    return dtype, float(np.float32(scale)), int(zero)


def _encoding_inits(tensor: str, e: tuple[str, float, int]) -> dict[str, np.ndarray]:
    return {f"{tensor}.s": np.array(e[1], np.float32), f"{tensor}.z": np.array(e[2], np.dtype(e[0]))}


def dq(codes: str, out: str, e: tuple[str, float, int], inits: dict) -> onnx.NodeProto:
    inits.update(_encoding_inits(codes, e))
    return helper.make_node("DequantizeLinear", [codes, f"{codes}.s", f"{codes}.z"], [out], name=f"dq_{out}")


def q(x: str, codes: str, e: tuple[str, float, int], inits: dict) -> onnx.NodeProto:
    inits.update(_encoding_inits(codes, e))
    return helper.make_node("QuantizeLinear", [x, f"{codes}.s", f"{codes}.z"], [codes], name=f"q_{codes}")


def node(op_type: str, inputs: list[str], outputs: list[str], **attrs) -> onnx.NodeProto:
    return helper.make_node(op_type, inputs, outputs, name=f"{op_type}_{outputs[0]}", **attrs)


def run_ort(case: Case) -> None:
    names = [o for n in case.nodes for o in n.output if o]
    graph = helper.make_graph(
        case.nodes, case.name,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in case.inputs.items()],
        [onnx.ValueInfoProto(name=n) for n in case.outputs],
        [onnx.numpy_helper.from_array(v, k) for k, v in case.inits.items()])
    for level, opt in LEVELS.items():
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
        model.ir_version = 10
        if level == "float":  # every intermediate as an output: shapes and values for the spec
            model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in case.outputs)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.graph_optimization_level = opt
        session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        wanted = [o.name for o in session.get_outputs()]
        got = dict(zip(wanted, session.run(wanted, case.inputs)))
        if level == "float":
            case.values = {**case.inputs, **case.inits, **got}
        case.refs[level] = {n: got[n] for n in case.outputs}


def _quant_of(case: Case) -> dict[str, QuantSpec]:
    found = {}
    for n in case.nodes:
        codes = n.input[0] if n.op_type == "DequantizeLinear" else (n.output[0] if n.op_type == "QuantizeLinear" else None)
        if codes:
            found[codes] = QuantSpec(str(case.inits[f"{codes}.z"].dtype), (float(case.inits[f"{codes}.s"]),),
                                     (int(case.inits[f"{codes}.z"]),))
    return found


def fused_op(case: Case) -> FusedOp:
    quant = _quant_of(case)
    names = list(dict.fromkeys([*case.inputs, *case.inits, *(o for n in case.nodes for o in n.output if o)]))
    tensors = tuple(TensorSpec(n, str(case.values[n].dtype), tuple(int(d) for d in case.values[n].shape),
                               n in case.inits, quant.get(n)) for n in names)
    by_name = {t.name: t for t in tensors}
    ports_in = [*case.inputs, *case.inits]
    task = TaskSpec("t0", "vector", tuple(node_spec(n) for n in case.nodes), tuple(ports_in), tuple(case.outputs))
    return FusedOp(case.op_type, case.op_type, tuple(by_name[n] for n in ports_in),
                   tuple(by_name[n] for n in case.outputs), (task,), tensors)


def node_types(nodes: tuple[NodeSpec, ...]) -> list[str]:
    return [n.op_type for n in nodes]


def lsb_diff(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.abs(ours.astype(np.int64) - ref.astype(np.int64))


def host_package(ops: list[FusedOp], folder: Path, name: str = "qvector.onnx") -> HostPackage:
    """One host-built package holding every op (one compile for all cases)."""
    spec = FusionSpec(name, "0" * 64, "sm8650", tuple(ops))
    return HostPackage(build_host(write_tree(render_package(spec), folder / "pkg")), spec)
