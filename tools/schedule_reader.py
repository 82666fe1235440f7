"""An optrace schematic (tools/optrace.py) as a happens-before graph (graph_passes/engines/qnn_schedule.py).

    runlist2      [id, id, ...]   main thread, program order     -> QnnSchedule ops, lane "main"
    runlist_vec   [id, id, ...]   HVX threads                    -> lane "vec"
    checkpoints   id: [wait, done]                               -> gate, done
    opdesc_map    '#k': opdesc(id, kernel, op_flags, csts_in)    -> kernel, resource, data predecessors
    bandwidth_information  opid: dram/vtcm read/write            -> bytes

Run-list entries without an op-table row are the slices of a sliced op (same origin node, same gates:
they take that op's kernel and predecessors), syncs and dummies. A ``csts_in`` key names an op-table
row; where that row is not in a run list (the join of an HVX op, a row merged away) the key stands for
what that row itself waits on, so every predecessor resolves to a run-list op.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from hexfuse.graph_passes.engines.qnn_schedule import QnnSchedule, ScheduledOp
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.optrace import Schedule, Step


def _resource(step: Step | None, lane: str) -> str:
    flags = step.op_flags if step is not None else ()
    if "RESOURCE_HMX" in flags or "FOR_HMX" in flags:
        return "hmx"
    if "FOR_DMA" in flags or "IS_DMA" in flags:
        return "dma"
    return "hvx" if lane == "vec" else "main"


def qnn_schedule(schedule: Schedule, node_of: Callable[[int], str] | None = None,
                 node_macs: Mapping[str, int] | None = None) -> QnnSchedule:
    """``node_of``: QNN node id (an op id's low 32 bits) -> ONNX node name ('' for none; default: QNN's
    own name); ``node_macs``: ONNX node -> MACs, shared among that node's HMX ops."""
    if not schedule.main_list:
        raise HexfuseError(f"schematic of {schedule.graph}: no main run list (runlist2): too old a QNN, or not optrace")
    name_of = node_of or (lambda origin: schedule.nodes.get(origin, ""))
    listed = [(op_id, "main") for op_id in schedule.main_list] + [(op_id, "vec") for op_id in schedule.vec_list]
    index = {op_id: i for i, (op_id, _) in enumerate(listed)}
    by_id = {step.op_id: step for step in schedule.steps}
    by_key = {step.key: step for step in schedule.steps}
    described = {(step.origin, schedule.gates.get(hex(step.op_id))): step for step in schedule.steps
                 if step.op_id in index and not step.name.startswith("@")}

    def step_of(op_id: int) -> Step | None:
        found = by_id.get(op_id)
        return found if found is not None else described.get((op_id & 0xFFFFFFFF, schedule.gates.get(hex(op_id))))

    def resolve(key: str, seen: set[str]) -> set[int]:
        step = by_key.get(key)
        if step is None or key in seen:
            return set()
        if step.op_id in index:
            return {index[step.op_id]}
        seen.add(key)
        return set().union(*(resolve(k, seen) for k in step.after)) if step.after else set()

    steps = [step_of(op_id) for op_id, _ in listed]
    hmx_per_node = Counter(name_of(op_id & 0xFFFFFFFF) for (op_id, lane), step in zip(listed, steps)
                           if _resource(step, lane) == "hmx")
    ops = []
    for i, ((op_id, lane), step) in enumerate(zip(listed, steps)):
        gate, done = schedule.gates.get(hex(op_id), (-1, -1))
        resource = _resource(step, lane)
        after = sorted(set().union(*(resolve(k, set()) for k in step.after)) - {i}) if step is not None else []
        node = name_of(op_id & 0xFFFFFFFF)
        macs = (node_macs or {}).get(node, 0) // max(1, hmx_per_node[node]) if resource == "hmx" else 0
        dma_start = -1
        if step is not None and "FOR_DMA" in step.op_flags and "MOVE_LATE" in step.op_flags and after:
            dma_start = after[0]
        vtcm, ddr = schedule.bandwidth.get(op_id, (0, 0))
        kernel = step.name.split("::", 1)[-1] if step is not None else ""
        ops.append(ScheduledOp(op_id, lane, kernel, resource, node, gate, done, tuple(after), vtcm, ddr, macs,
                               dma_start))
    return QnnSchedule(tuple(ops), schedule.graph)
