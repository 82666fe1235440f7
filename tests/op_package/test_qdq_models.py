"""The QDQ fusion inside the bundled QDQ models.

- Every DQ -> op -> Q unit it rewrites, run alone as a quantized kernel on the codes ONNX Runtime produced
  for its inputs in the original model, equals ORT's output codes within 1 LSB. (test_numerics checks the
  fused ops end to end; this looks inside the tasks, where a 1-LSB step at one unit is legal and is what
  downstream units then see.) Run with -s for the table: units, elements, elements 1 LSB off per op type.
- The HTP task ops read their ports as codes (wire_ports, qdq_ports.py): run the way the QNN EP drives
  them, the fused outputs still meet test_numerics' wire contract, and many more units are rewritten.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from hexfuse.graph_passes.spec.model import FusedOp, TaskSpec
from hexfuse.graph_passes.spec.model import TensorSpec
from hexfuse.op_package.host import quantize, wire_form
from hexfuse.op_package.htp_expand import expand_fused_op
from hexfuse.op_package.lower.qdq_fusion import Unit, find_qdq_units
from hexfuse.op_package.lower.qdq_ports import codes_at_ports
from tests.op_package._harness import _catalog_inputs, _random_input, source_models
from tests.op_package._qdq_units import host_package, lsb_diff
from tests.op_package.test_numerics import mismatches

QDQ_MODELS = [m for m in source_models() if m.stem.endswith("_qdq")]


def unit_op(index: int, unit: Unit, op: FusedOp) -> FusedOp:
    """A fused op holding one unit: its DQs, the op and its Qs, with every tensor it reads as an input."""
    nodes = (*unit.dqs.values(), unit.op, *unit.qs)
    tensors = {t.name: t for t in (*op.inputs, *op.outputs, *op.tensors)}
    produced = {o for n in nodes for o in n.outputs if o}
    inputs = list(dict.fromkeys(i for n in nodes for i in n.inputs if i and i not in produced))
    outputs = [q.outputs[0] for q in unit.qs]
    name = f"HexFuse_u{index}"
    task = TaskSpec("t0", "vector", nodes, tuple(inputs), tuple(outputs))
    return FusedOp(name, name, tuple(tensors[i] for i in inputs), tuple(tensors[o] for o in outputs), (task,),
                   tuple(tensors[n] for n in dict.fromkeys([*inputs, *produced])))


def source_name(name: str) -> str:
    """The original model's tensor behind a spec tensor: the pass gives every DQ one reader by copying it,
    and a copy's output is named <output>_hexfuse_dup[_k] (graph_passes/graph/qdq.py)."""
    return re.sub(r"_hexfuse_dup(_[0-9]+)?$", "", name)


def ort_values(model_path: Path, names: set[str], seed: int = 0) -> dict[str, np.ndarray]:
    """Values of the named tensors (by source_name) in one ORT run of the original model, harness inputs.
    One run only: ports captured from the fused model can sit 1 LSB away where ORT fused differently."""
    model = onnx.load(str(model_path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}
    known = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    wanted_names = {source_name(n) for n in names} & known
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in sorted(wanted_names - set(inits) - outputs))
    rng = np.random.default_rng(seed)
    how = _catalog_inputs(model_path)
    feeds = {i.name: _random_input(i, how.get(i.name, {}), rng) for i in model.graph.input if i.name not in inits}
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    wanted = [o.name for o in session.get_outputs()]
    found = {**inits, **feeds, **dict(zip(wanted, session.run(wanted, feeds)))}
    return {n: found[source_name(n)] for n in names if source_name(n) in found}


def codes(t: TensorSpec, value: np.ndarray) -> np.ndarray:
    """A port read as its codes holds, in the original model, the float value of the boundary DQ (or the one
    the boundary Q reads): its codes are that value quantized with the port's encoding."""
    return quantize(value, t.quant) if t.quant is not None and value.dtype == np.float32 else value


@pytest.mark.parametrize("wire_ports", [False, True], ids=["float_ports", "ports_as_codes"])
def test_rewritten_units_match_onnxruntime_inside_the_models(wire_ports: bool, case_for, tmp_path: Path) -> None:
    ops, origins = [], []
    for model in QDQ_MODELS:
        case = case_for(model)
        if case is None:
            continue
        for op in case.spec.fused_ops:
            seen = codes_at_ports(op) if wire_ports else op
            for unit in find_qdq_units(op, wire_ports=wire_ports):
                ops.append(unit_op(len(ops), unit, seen))
                origins.append((model, unit))
    assert ops, "no bundled QDQ model has a unit the fusion rewrites"
    package = host_package(ops, tmp_path, "units.onnx")
    needed: dict[Path, set[str]] = defaultdict(set)
    for op, (model, _) in zip(ops, origins):
        needed[model].update(t.name for t in (*op.inputs, *op.outputs))
    values = {model: ort_values(model, names) for model, names in needed.items()}
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    failures, compared = [], 0
    for op, (model, unit) in zip(ops, origins):
        got = values[model]
        if any(t.name not in got or got[t.name].shape != tuple(t.shape) for t in (*op.inputs, *op.outputs)):
            continue  # a tensor the pass made (micro-batch halves): not in the original model
        compared += 1
        ours, _ = package.run(op.op_type, [codes(t, got[t.name]) for t in op.inputs], serial=False, trace=False)
        for t, mine in zip(op.outputs, ours):
            diff = lsb_diff(mine, codes(t, got[t.name]))
            row = table[unit.op.op_type]
            row[0] += 1
            row[1] += diff.size
            row[2] += int((diff == 1).sum())
            if diff.max() > 1:
                failures.append(f"{model.stem}/{unit.op.name} ({unit.op.op_type}): off by {int(diff.max())} LSB")
    print("\nop type        units  elements  off by 1 LSB")
    for op_type, (units, elements, off) in sorted(table.items()):
        print(f"{op_type:<14} {units:>5} {elements:>9} {off:>13}")
    assert not failures, "\n".join(failures)


def test_bundled_qdq_models_hold_rewritable_units(case_for) -> None:
    """The contract above is not vacuous: the LMs' RMSNorm chains are rewritten (mean, sqrt, reciprocal)."""
    found = {unit.op.op_type for model in QDQ_MODELS if (case := case_for(model)) is not None
             for op in case.spec.fused_ops for unit in find_qdq_units(op)}
    assert {"ReduceMean", "Sqrt", "Reciprocal"} <= found, found


@pytest.mark.parametrize("model", QDQ_MODELS, ids=lambda m: m.stem)
def test_ports_as_codes_meet_the_wire_contract(model: Path, case_for) -> None:
    """The HTP task ops read their ports as codes: run the way the QNN EP drives them (the matrix
    outputs, QNN's own ops on HTP, taken from the whole op), the fused outputs still meet the contract."""
    case = case_for(model)
    if case is None:
        return
    ops = case.spec.fused_ops
    assert sum(len(find_qdq_units(op, wire_ports=True)) for op in ops) > sum(len(find_qdq_units(op)) for op in ops)
    failures = []
    for op in ops:
        outputs = case.package.run_wire(op.op_type, [case.values[t.name] for t in op.inputs])
        for task_op in expand_fused_op(op).task_ops:
            ins = [case.values[op.inputs[i].name] for i in task_op.inputs]
            for j, out in zip(task_op.outputs, case.package.run_wire(task_op.symbol, ins)):
                outputs[j] = out
        failures += mismatches(op, case.values, outputs, [wire_form(t, case.values[t.name])[0] for t in op.outputs])
    assert not failures, "\n".join(failures)

