"""Fused nodes chained through Q -> DQ (issue 19, item 6), checked without the SDK: the downstream node's
ports carry the upstream Q's encoding (the per-consumer DQ copy), its task op reads them as codes, and
its plan knows that encoding, so a port QNN hands over as plain float32 converts instead of failing
(test_htp_expand.py runs that on the host; test_htp_x86.py runs the model in the simulator)."""

from __future__ import annotations

from pathlib import Path

import onnx

from hexfuse.cli import main as hexfuse_main
from hexfuse.graph_passes.spec.model import load_spec
from hexfuse.op_package.htp_expand import expand_fused_op
from hexfuse.op_package.render import port_quant
from tests.op_package.chained_qdq import chained_qdq_model

FUSE_FLAGS = ["--target", "sm8650", "--ignore-schedule", "--allow-scalar", "--allow-merge-only", "--min-gain", "0", "--as-designed"]


def fuse_chained(tmp_path: Path) -> tuple[Path, Path]:
    """(original, fused) paths of the chained model, every group fused."""
    original = tmp_path / "chained_qdq.onnx"
    onnx.save(chained_qdq_model(), original)
    fused = tmp_path / "chained_qdq.fused.onnx"
    assert hexfuse_main(["fuse", str(original), "-o", str(fused), *FUSE_FLAGS]) == 0
    return original, fused


def chained_inputs(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(fused node, input) pairs where the input comes from another fused node's output through Q -> DQ."""
    producer = {out: node for node in model.graph.node for out in node.output}
    pairs = []
    for node in model.graph.node:
        for name in node.input if node.domain == "hexfuse" else ():
            dq = producer.get(name)
            q = producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
            up = producer.get(q.input[0]) if q is not None and q.op_type == "QuantizeLinear" else None
            if up is not None and up.domain == "hexfuse":
                pairs.append((node.name, name))
    return pairs


def test_chained_fused_nodes_read_their_ports_as_codes_with_the_upstream_encoding(tmp_path: Path) -> None:
    _, fused = fuse_chained(tmp_path)
    chained = chained_inputs(onnx.load(fused))
    assert chained, "the model no longer chains two fused nodes through Q -> DQ"
    spec = load_spec(str(fused.with_suffix(".hexfuse.json")))
    ports = {t.name: t for op in spec.fused_ops for t in op.inputs}
    upstream = {t.name: t for op in spec.fused_ops for t in op.outputs}
    for _, name in chained:
        source = name.split(".dq")[0]  # the DQ copy's tensor name starts with the upstream output's
        assert ports[name].wire == upstream[source].wire and ports[name].wire.dtype == "uint8"
    names = {name for _, name in chained}
    read = [port for op in spec.fused_ops for task_op in expand_fused_op(op).task_ops
            for port in task_op.plan.inputs if port.name in names]
    assert read, "no task op reads a chained port"
    for port in read:  # read as codes, whose encoding the plan keeps
        assert port.dtype == "uint8" and port.quant == ports[port.name].wire
        assert port_quant(port) == f"{{1, {float(port.quant.scale[0])!r}f, {port.quant.zero_point[0]}}}"
