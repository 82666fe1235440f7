"""How a fused op runs on HTP: its matrix task on QNN's own ops, every other task as a package op of
its own on an HVX thread, joined by optimization rules that expand the fused op at prepare.

    HexFuse_k(in_0..in_m, serial)                      per output j, one rule per value of `serial`:
      ├─ out_0  (matrix task)   ──rule──>  QNN_MatMul(in_0, in_1, ...)        QNN lowers it (HMX where it can)
      └─ out_1  (vector task)   ──rule──>  HexFuse_k__t1(in_2)                RESOURCE_HVX: launched on an HVX
                                                                               thread, waited on where read
    serial = 1 (the barrier switch, same kernels):
      └─ out_1                  ──rule──>  HexFuse_k__t1_s(in_2, <out_0's expression>)

The serial variant of a task op reads one output of the task before it, so the scheduler must run
them one after the other; QNN's common-subexpression elimination makes every copy of an expression
one op. Matrix tasks come first in the serial order (QNN ops cannot wait on an extra input).
Pure and deterministic: the same FusedOp gives the same Expansion.
"""

from __future__ import annotations

from dataclasses import dataclass

from hexfuse.graph_passes.spec.model import FusedOp, TaskSpec
from hexfuse.op_package.plan import OpPlan, plan_fused_op
from hexfuse.op_package.qnn_ops import input_tag, translate_matrix_task, with_output_def


@dataclass(frozen=True)
class TaskOp:
    """A non-matrix task run as a package op of its own (an HVX thread on HTP)."""
    symbol: str
    serial_symbol: str  # the same kernels with one more input: the output of the task before it
    engine: str
    plan: OpPlan
    inputs: tuple[int, ...]  # fused-op input indices, in the task op's input order
    outputs: tuple[int, ...]  # fused-op output indices, in the task op's output order


@dataclass(frozen=True)
class Rule:
    output: int  # fused-op output index
    serial: bool
    replacement: str  # HTP optimization grammar


@dataclass(frozen=True)
class Expansion:
    task_ops: tuple[TaskOp, ...]
    rules: tuple[Rule, ...]
    reason: str | None = None  # why the fused op cannot be expanded (then it cannot run on HTP)


def _task_op(op: FusedOp, index: int, task: TaskSpec) -> TaskOp:
    inputs = tuple(i for i, t in enumerate(op.inputs) if t.name in task.inputs)
    outputs = tuple(i for i, t in enumerate(op.outputs) if t.name in task.outputs)
    symbol = f"{op.op_type}__t{index}"
    sub = FusedOp(symbol, op.node_name, tuple(op.inputs[i] for i in inputs), tuple(op.outputs[i] for i in outputs),
                  (task,), op.tensors, op.rule, op.predicted_gain)
    # QNN hands a task op its ports as codes: the plan reads them as such, so the quantized kernels
    # take over the vector work next to the ports too (lower/qdq_ports.py)
    return TaskOp(symbol, f"{symbol}_s", task.engine, plan_fused_op(sub, wire_ports=True), inputs, outputs)


def _call(symbol: str, inputs: list[str], n_outputs: int, which: int) -> str:
    args = ", ".join(inputs)
    if n_outputs == 1:
        return f'Op("{symbol}", {args})'
    return f'OpMultiOut({n_outputs}, {which}, "{symbol}", {args})'


def matrix_blocker(op: FusedOp) -> str | None:
    """Why the matrix work of ``op`` cannot be handed to QNN's own ops (None: it can)."""
    for task in op.tasks:
        if task.engine == "matrix":
            reason = translate_matrix_task(op, task).reason
            if reason is not None:
                return f"on HTP the matrix work must run on QNN's own ops: {reason}"
    return None


def task_ops(op: FusedOp) -> tuple[TaskOp, ...]:
    """The package ops that run the non-matrix tasks of ``op`` on HTP (HVX threads)."""
    return tuple(_task_op(op, i, t) for i, t in enumerate(op.tasks) if t.engine != "matrix")


def expand_fused_op(op: FusedOp) -> Expansion:
    matrix = [t for t in op.tasks if t.engine == "matrix"]
    exprs: dict[int, str] = {}  # fused output index -> matrix expression
    for task in matrix:
        translation = translate_matrix_task(op, task)
        if translation.reason is not None:
            return Expansion((), (), f"matrix task {task.id}: {translation.reason}")
        for j, tensor in enumerate(op.outputs):
            if tensor.name in translation.outputs:
                exprs[j] = translation.outputs[tensor.name]
    expanded = task_ops(op)

    # Serial order: matrix tasks first, then the task ops in spec order. `after[k]` is the expression
    # task op k waits on in serial mode (one output of whatever runs just before it), or None.
    order: list[str] = [exprs[j] for j in sorted(exprs)][:1]
    rules: list[Rule] = []
    for j, expr in sorted(exprs.items()):
        rules += [Rule(j, False, expr), Rule(j, True, expr)]
    for task_op in expanded:
        if not task_op.outputs:  # a task nothing reads (dead code) needs no rule
            continue
        inputs = [input_tag(i) for i in task_op.inputs]
        after = order[-1] if order else None
        n = len(task_op.outputs)
        for which, j in enumerate(task_op.outputs):
            rules.append(Rule(j, False, _call(task_op.symbol, inputs, n, which)))
            serial_symbol, serial_inputs = ((task_op.serial_symbol, [*inputs, after]) if after is not None
                                            else (task_op.symbol, inputs))
            rules.append(Rule(j, True, _call(serial_symbol, serial_inputs, n, which)))
        # the next task op waits on a copy of one of this one's outputs, spelt with its own output def
        # so that it is the same op as the rule's (CSE merges them) and not sized like its reader
        # (an output with no encoding here, an integer one, say, stays implicit: the size of its reader)
        serial_first = next(r.replacement for r in rules if r.output == task_op.outputs[0] and r.serial)
        copies = (with_output_def(op, op.outputs[j].name, next(r.replacement for r in rules if r.output == j and r.serial))
                  for j in task_op.outputs)
        order.append(next((c for c in copies if c is not None), serial_first))
    return Expansion(expanded, tuple(sorted(rules, key=lambda r: (r.output, r.serial))))
