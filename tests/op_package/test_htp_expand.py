"""The HTP expansion of fused ops (htp_expand.py, qnn_ops.py): QNN's own ops for matrix tasks, task ops
for the rest, one rule per output and barrier mode; checked without the SDK (the SDK test runs them)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from hexfuse import analyze_model, fuse_model, supported_op_types
from hexfuse.graph_passes import pipeline
from hexfuse.graph_passes.backend import Backend
from hexfuse.graph_passes.cost.cli import scorer_for
from hexfuse.graph_passes.spec.model import FusionSpec, load_spec
from hexfuse.op_package.htp_expand import expand_fused_op
from hexfuse.op_package.qnn_ops import translate_matrix_task
from hexfuse.op_package.render import render_package
from tests import builders
from tests.cost.specs import estimated
from tests.op_package._harness import NEGATIVE_MODELS

ROOT = Path(__file__).resolve().parents[2]
MATRIX_KERNELS = ("matmul_f32", "conv_f32")


def test_every_output_gets_one_rule_per_barrier_mode(source_model: Path, case_for) -> None:
    case = case_for(source_model)
    if case is None:
        assert source_model.name in NEGATIVE_MODELS
        return
    for op in case.spec.fused_ops:
        expansion = expand_fused_op(op)
        if expansion.reason is not None:
            assert any(t.engine == "matrix" for t in op.tasks), expansion.reason
            continue
        assert sorted((r.output, r.serial) for r in expansion.rules) == [
            (j, s) for j in range(len(op.outputs)) for s in (False, True)]
        matrix_outputs = {name for t in op.tasks if t.engine == "matrix" for name in t.outputs}
        for rule in expansion.rules:
            if op.outputs[rule.output].name in matrix_outputs:
                assert "QNN_" in rule.replacement and "__t" not in rule.replacement
            else:
                assert f'"{op.op_type}__t' in rule.replacement
                # serial mode: a task op after a matrix task waits on it through one extra input
                if rule.serial and matrix_outputs:
                    assert "_s\"" in rule.replacement and "QNN_" in rule.replacement
                # concurrent mode: task ops read the entry (the _e variant) exactly where there is one
                entered = any(o.symbol == f"{op.op_type}__enter" for o in expansion.order_ops)
                assert rule.serial or ('_e", ' in rule.replacement) == entered


def test_task_ops_compute_what_the_fused_op_computes(case_for) -> None:
    """Each task op (the plan HTP runs on an HVX thread, ports as codes) reproduces its outputs of the
    whole op run through the same wire: exactly for float ports, within one code step for quantized
    ones (the task op's quantized kernels round once where the whole op's float plan rounds at the Q)."""
    for name in ("gptj_block_qdq", "googlenet", "llama_prefill_decode"):
        case = case_for(ROOT / "models" / f"{name}.onnx")
        for op in case.spec.fused_ops:
            whole = case.package.run_wire(op.op_type, [case.values[t.name] for t in op.inputs])
            for task_op in expand_fused_op(op).task_ops:
                ins = [case.values[op.inputs[i].name] for i in task_op.inputs]
                ours = case.package.run_wire(task_op.symbol, ins)
                for j, out in zip(task_op.outputs, ours):
                    if op.outputs[j].wire is None:
                        assert np.array_equal(out, whole[j], equal_nan=True), (task_op.symbol, op.outputs[j].name)
                    else:
                        steps = np.abs(out.astype(np.int64) - whole[j].astype(np.int64))
                        assert steps.max() <= 1, (task_op.symbol, op.outputs[j].name, int(steps.max()))


def test_htp_sources_hold_no_matrix_kernel(case_for) -> None:
    case = case_for(ROOT / "models" / "gptj_block_qdq.onnx")
    files = render_package(case.spec)
    tasks = {path: text for path, text in files.items() if path.startswith("src/tasks/")}
    assert tasks, "no task plans generated"
    assert not any(kernel in text for text in tasks.values() for kernel in MATRIX_KERNELS)
    makefile = files["Makefile"]
    portable = next(line for line in makefile.splitlines() if line.startswith("PORTABLE :="))
    assert "matrix" not in portable and "fused" not in portable and "executor" not in portable
    assert any(path.startswith("src/kernels/matrix/") for path in files)  # the host build keeps them


def _with_conv_attrs(spec: FusionSpec, **attrs) -> FusionSpec:
    op = spec.fused_ops[0]
    tasks = []
    for task in op.tasks:
        nodes = tuple(dataclasses.replace(n, attributes={**n.attributes, **attrs}) if n.op_type == "Conv" else n
                      for n in task.nodes)
        tasks.append(dataclasses.replace(task, nodes=nodes))
    return dataclasses.replace(spec, fused_ops=(dataclasses.replace(op, tasks=tuple(tasks)),))


@pytest.mark.parametrize("attrs, reason, renders", [
    ({"group": 2}, "is grouped", False),  # (the host kernels refuse it too: channels no longer divide)
    ({"auto_pad": "SAME_UPPER"}, "auto_pad=SAME_UPPER", True),
])
def test_untranslatable_matrix_nodes_are_refused_with_a_reason(case_for, attrs, reason, renders) -> None:
    case = case_for(ROOT / "models" / "googlenet.onnx")
    spec = _with_conv_attrs(case.spec, **attrs)
    op = spec.fused_ops[0]
    matrix = next(t for t in op.tasks if t.engine == "matrix")
    assert reason in (translate_matrix_task(op, matrix).reason or "")
    expansion = expand_fused_op(op)
    assert expansion.reason and reason in expansion.reason and not expansion.rules
    if not renders:
        return
    glue = render_package(spec)[f"src/ops/{op.op_type}.cpp"]
    assert "cannot run on HTP" in glue and "DEF_PACKAGE_OPTIMIZATION" not in glue


def test_generated_rules_are_deterministic(case_for) -> None:
    case = case_for(ROOT / "models" / "llama_prefill_decode_qdq.onnx")
    spec = load_spec(str(case.fused.with_suffix(".hexfuse.json")))
    assert [expand_fused_op(op) for op in spec.fused_ops] == [expand_fused_op(op) for op in case.spec.fused_ops]


def test_folded_batchnorm_epilogue_expands_into_qnn_elementwise_ops(tmp_path) -> None:
    """Conv -> BatchNormalization -> Mul(c): one matrix task on HTP, the norm as x * w + b per channel."""
    model = builders.conv_bn_branches(activation=False)  # a folded Relu has no QNN translation yet
    scorer = scorer_for(estimated("sm8550"), pipeline.DEFAULT_MIN_GAIN, as_designed=True)  # the branches are sized for these figures
    result = fuse_model(builders.save(model, tmp_path / "m.onnx"), scorer, allow_scalar=True)
    (op,) = result.spec.fused_ops
    matrix = next(t for t in op.tasks if t.engine == "matrix")
    assert [n.op_type for n in matrix.nodes] == ["Conv", "BatchNormalization", "Mul"]
    expansion = expand_fused_op(op)
    assert expansion.reason is None
    rule = next(r.replacement for r in expansion.rules if op.outputs[r.output].name in matrix.outputs)
    for qnn_op in ("QNN_Conv2d", "QNN_ElementWiseRsqrt", "QNN_ElementWiseSubtract", "QNN_ElementWiseMultiply"):
        assert qnn_op in rule
    assert "gen_ConstScalar_f32(1e-05f)" in rule  # the default epsilon


def test_pass_refuses_matrix_work_qnn_ops_cannot_take(tmp_path) -> None:
    """The op package's backend refuses a grouped Conv with the reason; without that check it fuses."""
    path = builders.save(builders.conv_bn_branches(group=2), tmp_path / "m.onnx")
    scorer = scorer_for(estimated("sm8550"), pipeline.DEFAULT_MIN_GAIN, as_designed=True)  # the branches are sized for these figures
    refused = analyze_model(path, scorer)
    assert not refused.selection.groups
    assert any("on HTP the matrix work must run on QNN's own ops" in r and "is grouped" in r
               for r in refused.selection.reasons.values())
    unchecked = pipeline.analyze_model(path, scorer, backend=Backend("host", supported_op_types()))
    assert unchecked.selection.groups


def test_entry_and_joins_hold_the_parts_together_in_both_barrier_modes(case_for) -> None:
    """The matrix work reads its activation through the entry op, which waits on every non-constant input
    of the task ops; every task output is a join that waits on the matrix work. Main-thread copies, the
    same in both barrier modes. The task op's extra ordering input is the one difference: the entry
    (the _e variant, concurrent) or the matrix output (the _s variant, serial)."""
    case = case_for(ROOT / "models" / "gptj_block_qdq.onnx")
    for op in case.spec.fused_ops:
        expansion = expand_fused_op(op)
        enter, join = f"{op.op_type}__enter", f"{op.op_type}__join"
        assert [o.symbol for o in expansion.order_ops] == [enter, join]
        matrix_outputs = {name for t in op.tasks if t.engine == "matrix" for name in t.outputs}
        task_inputs = {f'"in_{i}"' for t in expansion.task_ops for i in t.inputs if not op.inputs[i].static}
        rules = {(r.output, r.serial): r.replacement for r in expansion.rules}
        for (j, serial), rule in rules.items():
            entered = rule[rule.index(f'Op("{enter}", '):]
            assert all(tag in entered.split(")")[0] for tag in task_inputs), rule
            if op.outputs[j].name in matrix_outputs:
                assert join not in rule and rule == rules[(j, not serial)]
            else:
                assert rule.startswith(f'Op("{join}", Op("{op.op_type}__t') and "QNN_MatMul" in rule
                (task_op,) = [t for t in expansion.task_ops if j in t.outputs]
                symbol = task_op.serial_symbol if serial else task_op.entry_symbol
                call = f'Op("{symbol}", ' + ", ".join(f'"in_{i}"' for i in task_op.inputs) + ", WITH_SIZE("
                assert rule.startswith(f'Op("{join}", {call}'), rule
                # the extra input: (serial) the matrix work, which reads the entry; else the entry itself
                after = rule[len(f'Op("{join}", {call}'):]
                first = "QNN_MatMul" if serial else f'Op("{enter}", '
                assert after.index(first) == min(after.index(k) for k in ("QNN_MatMul", f'Op("{enter}", '))
        glue = render_package(case.spec)[f"src/ops/{op.op_type}.cpp"]
        for symbol in (enter, join):  # no resource flag: the main thread, in program order
            assert f'DEF_PACKAGE_OP_AND_COST_AND_FLAGS(({symbol}_impl), "{symbol}", FAST)' in glue
            assert f"GraphStatus {symbol}_impl(Tensor& out, const Tensor& in_0" in glue
        for task_op in expansion.task_ops:  # both ordering variants run on an HVX thread
            for symbol in (task_op.serial_symbol, task_op.entry_symbol):
                assert f'(({symbol}_impl), "{symbol}", SNAIL, Flags::RESOURCE_HVX)' in glue


def test_task_ops_take_codes_ports_handed_over_as_plain_float(case_for) -> None:
    """Issue 19 item 6: where QNN hands a codes port over as plain float32 (its DQ / Q left as ops of their
    own), the task op converts it with the port's own encoding instead of failing with kBridgeBadType (11):
    the same codes as through the quantized wire."""
    case = case_for(ROOT / "models" / "gptj_block_qdq.onnx")
    for op in case.spec.fused_ops:
        for task_op in expand_fused_op(op).task_ops:
            ports = [op.inputs[i] for i in task_op.inputs]
            assert any(t.wire is not None for t in ports)
            ins = [case.values[t.name] for t in ports]
            coded = case.package.run_wire(task_op.symbol, ins)
            plain = case.package.run_wire(task_op.symbol, ins, plain_float=True)
            for j, codes, values in zip(task_op.outputs, coded, plain):
                wire = op.outputs[j].wire
                assert values.dtype == np.float32 and wire is not None
                expected = (codes.astype(np.float32) - np.float32(wire.zero_point[0])) * np.float32(wire.scale[0])
                assert np.array_equal(values, expected), (task_op.symbol, op.outputs[j].name)


def test_the_entry_waits_on_the_matrix_works_second_operand() -> None:
    """Where the matrix task multiplies two activations (llama's attention: probabilities x the expanded
    V), the entry waits on the second one too: else the task op, which reads the entry, ran alone while
    the matrix work waited for V (HexFuse_16 in the simulator, docs/htp.md)."""
    scorer = scorer_for("sm8650", 0.0, model=ROOT / "models" / "llama_prefill_decode_qdq.onnx", use_schedule=False, as_designed=True)
    result = fuse_model(ROOT / "models" / "llama_prefill_decode_qdq.onnx", scorer)
    checked = 0
    for op in result.spec.fused_ops:
        index = {t.name: i for i, t in enumerate(op.inputs)}
        operands = [index[n] for t in op.tasks if t.engine == "matrix" for n in t.inputs if not op.inputs[index[n]].static]
        if len(operands) < 2:
            continue
        expansion = expand_fused_op(op)
        for rule in (r.replacement for r in expansion.rules):
            call = rule[rule.index(f'Op("{op.op_type}__enter", '):]
            waited = call[:call.index(")")]
            assert all(f'"in_{i}"' in waited for i in operands), (op.op_type, waited)
        checked += 1
    assert checked >= 2
