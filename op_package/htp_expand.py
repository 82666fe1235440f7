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

Entry and exit (both modes): left alone, QNN pulls the parts apart (a task op launched after its
matrix partner is done, or joined by an early reader before the partner starts: issue 19). Two
main-thread pass-through ops hold them together, as the fused node's single entry and exit:

    QNN_MatMul(HexFuse_k__enter(in_0, in_2), ...)      the matrix work starts once every input of the node
                                                       exists (the entry waits on all of them)
    HexFuse_k__join(HexFuse_k__t1_e(in_2, <enter>), <out_0>)
                                                       readers of a task output wait for every other part

The task op reads the entry too (its `_e` variant, one more input that only orders): issued before the
entry, QNN may place its wait, and the checkpoint that signals it, ahead of the matrix work (llama's
HexFuse_7: the wait shared a checkpoint with an unrelated @Sync on the main list before the group's
HMX ops). In serial mode the `_s` variant's extra input, the matrix output, already follows the entry.

Pure and deterministic: the same FusedOp gives the same Expansion.
"""

from __future__ import annotations

from dataclasses import dataclass

from hexfuse.graph_passes.spec.model import FusedOp, TaskSpec
from hexfuse.op_package.plan import OpPlan, plan_fused_op
from hexfuse.op_package.qnn_ops import input_def, input_tag, translate_matrix_task, with_output_def


@dataclass(frozen=True)
class TaskOp:
    """A non-matrix task run as a package op of its own (an HVX thread on HTP)."""
    symbol: str
    serial_symbol: str  # the same kernels with one more input: the output of the task before it
    entry_symbol: str  # the same kernels with one more input: the entry (concurrent mode)
    engine: str
    plan: OpPlan
    inputs: tuple[int, ...]  # fused-op input indices, in the task op's input order
    outputs: tuple[int, ...]  # fused-op output indices, in the task op's output order


@dataclass(frozen=True)
class OrderOp:
    """A main-thread package op that copies its first input and only waits on the others: the entry
    and the joins that hold a fused op's parts together in QNN's schedule."""
    symbol: str
    arity: int  # inputs, the copied one included


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
    order_ops: tuple[OrderOp, ...] = ()


def _task_op(op: FusedOp, index: int, task: TaskSpec) -> TaskOp:
    inputs = tuple(i for i, t in enumerate(op.inputs) if t.name in task.inputs)
    outputs = tuple(i for i, t in enumerate(op.outputs) if t.name in task.outputs)
    symbol = f"{op.op_type}__t{index}"
    sub = FusedOp(symbol, op.node_name, tuple(op.inputs[i] for i in inputs), tuple(op.outputs[i] for i in outputs),
                  (task,), op.tensors, op.rule, op.predicted_gain)
    # QNN hands a task op its ports as codes: the plan reads them as such, so the quantized kernels
    # take over the vector work next to the ports too (lower/qdq_ports.py)
    return TaskOp(symbol, f"{symbol}_s", f"{symbol}_e", task.engine, plan_fused_op(sub, wire_ports=True), inputs, outputs)


def _call(symbol: str, inputs: list[str], n_outputs: int = 1, which: int = 0) -> str:
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


def _entry(op: FusedOp, matrix: list[TaskSpec], expanded: tuple[TaskOp, ...]) -> tuple[dict[str, str], OrderOp | None]:
    """The first matrix task reads its first non-constant input through the entry op, which also waits
    on every other non-constant input of the fused op's parts (the task ops', then the matrix tasks'
    own): QNN cannot start the matrix work before a task op can start, nor a task op (which reads the
    entry) before the matrix work could. Without the matrix tasks' other inputs, a task op ran alone
    while the matrix work waited for its second operand (llama's attention MatMuls: the V expand,
    docs/htp.md). (None where there is nothing to order.)"""
    index = {t.name: i for i, t in enumerate(op.inputs)}
    carrier = op.entry_carrier
    task_inputs = (i for t in expanded if t.outputs for i in t.inputs)
    matrix_inputs = (index[n] for task in matrix for n in task.inputs)  # (tasks are independent: all op inputs)
    waits = [i for i in dict.fromkeys([*task_inputs, *matrix_inputs]) if i != carrier and not op.inputs[i].static]
    if carrier is None or not waits:
        return {}, None
    entry = OrderOp(f"{op.op_type}__enter", 1 + len(waits))
    expr = input_def(op, carrier, _call(entry.symbol, [input_tag(i) for i in (carrier, *waits)]))
    return {op.inputs[carrier].name: expr}, entry


def _spelt(op: FusedOp, task_op: TaskOp, calls: list[str]) -> str | None:
    """One of the task op's calls with its own output def, to be nested in a rule for another output
    (None where no output of it has an HTP encoding here: an integer one, say)."""
    return next((c for j, call in zip(task_op.outputs, calls) if (c := with_output_def(op, op.outputs[j].name, call))),
                None)


def _task_calls(op: FusedOp, expanded: list[TaskOp], first: str | None, serial: bool,
                entry: str | None) -> list[list[str]]:
    """Per task op, per output: its call (the serial variant waits on the part before it: ``first``,
    then the previous task op; concurrent, the entry variant waits on the ``entry``, so that QNN
    cannot issue the task op, and so place its wait, ahead of the fused node's entry)."""
    calls: list[list[str]] = []
    after = first
    for task_op in expanded:
        inputs = [input_tag(i) for i in task_op.inputs]
        symbol = task_op.symbol
        if serial and after is not None:
            symbol, inputs = task_op.serial_symbol, [*inputs, after]
        elif not serial and entry is not None:
            symbol, inputs = task_op.entry_symbol, [*inputs, entry]
        n = len(task_op.outputs)
        calls.append([_call(symbol, inputs, n, which) for which in range(n)])
        # (left implicit where it cannot be spelt: it then takes the size of its reader)
        after = _spelt(op, task_op, calls[-1]) or calls[-1][0]
    return calls


def expand_fused_op(op: FusedOp) -> Expansion:
    matrix = [t for t in op.tasks if t.engine == "matrix"]
    expanded = task_ops(op)
    live = [t for t in expanded if t.outputs]  # a task nothing reads (dead code) needs no rule
    through, entry = _entry(op, matrix, expanded)
    exprs: dict[int, str] = {}  # fused output index -> matrix expression
    parts: list[str] = []  # one output of every matrix task, spelt: what a join waits on
    for task in matrix:
        translation = translate_matrix_task(op, task, through)
        if translation.reason is not None:
            return Expansion((), (), f"matrix task {task.id}: {translation.reason}")
        for j, tensor in enumerate(op.outputs):
            if tensor.name in translation.outputs:
                exprs[j] = translation.outputs[tensor.name]
        parts += [translation.outputs[n] for n in task.outputs if n in translation.outputs][:1]
    rules = [Rule(j, serial, expr) for j, expr in sorted(exprs.items()) for serial in (False, True)]
    join = OrderOp(f"{op.op_type}__join", len(parts) + len(live)) if len(parts) + len(live) > 1 else None
    for serial in (False, True):
        calls = _task_calls(op, live, parts[0] if parts else None, serial, next(iter(through.values()), None))
        spelt = [_spelt(op, t, cs) for t, cs in zip(live, calls)]
        for k, task_op in enumerate(live):
            # a join on every task output: its readers wait for every other part (exit of the fused node);
            # none where another part cannot be spelt (a join of fewer inputs would be another op)
            others = [*parts, *(c for i, c in enumerate(spelt) if i != k and c is not None)]
            for j, call in zip(task_op.outputs, calls[k]):
                joined = join is not None and len(others) == join.arity - 1
                rules.append(Rule(j, serial, _call(join.symbol, [call, *others]) if joined else call))
    order_ops = tuple(o for o in (entry, join) if o is not None and any(f'"{o.symbol}"' in r.replacement for r in rules))
    return Expansion(expanded, tuple(sorted(rules, key=lambda r: (r.output, r.serial))), None, order_ops)
