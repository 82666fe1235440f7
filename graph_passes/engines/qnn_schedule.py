"""QNN's own schedule of a prepared graph, read as a happens-before graph.

The HTP backend turns a graph into two run lists and a table of checkpoints (the optrace schematic,
tools/optrace.py reads it; DESIGN.md section 5):

    main  (one thread, program order; every HMX op, DMA starts and joins, syncs)
        m0 ──> m1 ──> m2 ──> m3 ──> ...                 edge: main-list order
    vec   (HVX threads)                                  edge: done(c) ──> every op gated on c
        v0     v1     v2 ...                             (an op waits for its gate's checkpoint, which
                                                           counts the ops whose done is that checkpoint)

Two ops can run at the same time exactly when neither reaches the other in this graph. Checkpoint 0
is nobody's gate (its "Gate cnt" is always 0), so gates <= 0 mean "no wait". Beside the gating the
schedule keeps each op's data predecessors (``after``: the op-table's ``csts_in`` resolved to run-list
ops) so that a changed graph can be scheduled again (replay.py), and the bytes each op moves
(``bandwidth_information``) so that it can be priced.

This module is data only: built by tools/optrace.py from a schematic, stored in an engine map
(engine_map.py) as JSON, read by the pass. Nothing here knows QNN's file format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from hexfuse.graph_passes.errors import HexfuseError

LANES = ("main", "vec")
RESOURCES = ("hmx", "hvx", "dma", "main")
COPY_KERNELS = ("flat_to_vtcm", "flat_from_vtcm")  # layout copies QNN adds at flat-tensor boundaries


@dataclass(frozen=True)
class ScheduledOp:
    """One entry of a run list."""

    op_id: int
    lane: str  # main | vec
    kernel: str  # QNN kernel ('ConvLayer_s1.opt'); slices carry their base op's; '' when the table has none
    resource: str  # hmx | hvx | dma | main: what the op occupies while it runs
    node: str = ""  # ONNX node it was expanded from ('' for QNN's own nodes, syncs, graph I/O)
    gate: int = -1  # checkpoint it waits for (<= 0: none)
    done: int = -1  # checkpoint it signals (< 0: none)
    after: tuple[int, ...] = ()  # indices (into QnnSchedule.ops) of its data predecessors
    vtcm_bytes: int = 0  # VTCM read + write
    ddr_bytes: int = 0  # DDR read + write
    macs: int = 0  # matrix work of an HMX op (its ONNX node's MACs shared among the node's HMX ops)
    dma_start: int = -1  # for a DMA join: index of the op that started the transfer

    @property
    def is_sync(self) -> bool:
        return self.kernel.startswith("@")

    @property
    def is_copy(self) -> bool:
        return self.kernel.startswith(COPY_KERNELS)


@dataclass(frozen=True)
class QnnSchedule:
    """Run lists of one prepared graph: ``ops`` holds the main list in order, then the vec list in order."""

    ops: tuple[ScheduledOp, ...]
    graph: str = ""
    _reach: list[int] | None = field(default=None, repr=False, compare=False)

    @property
    def main(self) -> list[int]:
        return [i for i, op in enumerate(self.ops) if op.lane == "main"]

    @cached_property
    def ddr_bytes(self) -> int:
        """Every byte the ops move through DDR (the replay's floor reads it once per fit point)."""
        return sum(op.ddr_bytes for op in self.ops)

    @property
    def vec(self) -> list[int]:
        return [i for i, op in enumerate(self.ops) if op.lane == "vec"]

    def signallers(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for i, op in enumerate(self.ops):
            if op.done > 0:
                out.setdefault(op.done, []).append(i)
        return out

    def gating_edges(self) -> list[tuple[int, int]]:
        """The happens-before edges: main-list order plus done(c) -> every op gated on c."""
        edges = []
        main = self.main
        edges += list(zip(main, main[1:]))
        signals = self.signallers()
        for i, op in enumerate(self.ops):
            if op.gate > 0:
                edges += [(s, i) for s in signals.get(op.gate, ()) if s != i]
        return edges

    def reach(self) -> list[int]:
        """reach[i]: bitset of the ops that i happens before (transitively)."""
        if self._reach is None:
            object.__setattr__(self, "_reach", _closure(len(self.ops), self.gating_edges()))
        return self._reach  # type: ignore[return-value]

    def ordered(self, a: int, b: int) -> bool:
        reach = self.reach()
        return bool(reach[a] >> b & 1 or reach[b] >> a & 1)

    def unordered_pairs(self, first: Callable[[ScheduledOp], bool], second: Callable[[ScheduledOp], bool]) -> int:
        """How many (x, y) with first(x), second(y) may run at the same time."""
        xs = [i for i, op in enumerate(self.ops) if first(op)]
        ys = [i for i, op in enumerate(self.ops) if second(op)]
        return sum(1 for x in xs for y in ys if x != y and not self.ordered(x, y))

    def overlapping(self, first: Callable[[ScheduledOp], bool], second: Callable[[ScheduledOp], bool]) -> int:
        """How many ops with first(op) may run beside at least one op with second(op)."""
        ys = [i for i, op in enumerate(self.ops) if second(op)]
        return sum(1 for x, op in enumerate(self.ops)
                   if first(op) and any(x != y and not self.ordered(x, y) for y in ys))

    def counts(self) -> dict[str, int]:
        """The figures a schedule is judged by (originals and fused models side by side)."""
        hmx = lambda op: op.resource == "hmx"  # noqa: E731
        hvx = lambda op: op.lane == "vec"  # noqa: E731
        return {
            "ops": len(self.ops),
            "main": sum(1 for op in self.ops if op.lane == "main"),
            "vec": sum(1 for op in self.ops if op.lane == "vec"),
            "hmx": sum(1 for op in self.ops if op.resource == "hmx"),
            "hvx_hmx_pairs": self.unordered_pairs(hvx, hmx),
            "hvx_beside_hmx": self.overlapping(hvx, hmx),
            "copies": sum(1 for op in self.ops if op.is_copy),
            "syncs": sum(1 for op in self.ops if op.is_sync),
        }

    def of_nodes(self, nodes: Iterable[str]) -> list[int]:
        wanted = set(nodes)
        return [i for i, op in enumerate(self.ops) if op.node and op.node in wanted]

    # -- JSON (engine maps carry it) -------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Compact rows: [op_id, lane, kernel, resource, node, gate, done, after, vtcm, ddr, macs, dma_start]."""
        rows = [[op.op_id, op.lane, op.kernel, op.resource, op.node, op.gate, op.done, list(op.after),
                 op.vtcm_bytes, op.ddr_bytes, op.macs, op.dma_start] for op in self.ops]
        return {"graph": self.graph, "columns": list(_COLUMNS), "ops": rows}

    @staticmethod
    def from_json(data: Any, where: str) -> QnnSchedule:
        if not isinstance(data, dict) or not isinstance(data.get("ops"), list):
            raise HexfuseError(f"{where}: schedule: expected {{'graph', 'columns', 'ops'}}")
        if data.get("columns") != list(_COLUMNS):
            raise HexfuseError(f"{where}: schedule: columns {data.get('columns')} are not {list(_COLUMNS)}")
        ops = []
        for n, row in enumerate(data["ops"]):
            try:
                op_id, lane, kernel, resource, node, gate, done, after, vtcm, ddr, macs, dma_start = row
                op = ScheduledOp(int(op_id), str(lane), str(kernel), str(resource), str(node), int(gate), int(done),
                                 tuple(int(a) for a in after), int(vtcm), int(ddr), int(macs), int(dma_start))
            except (TypeError, ValueError):
                raise HexfuseError(f"{where}: schedule op {n}: expected a row of {len(_COLUMNS)} fields") from None
            if op.lane not in LANES or op.resource not in RESOURCES:
                raise HexfuseError(f"{where}: schedule op {n}: lane {op.lane!r} / resource {op.resource!r} unknown")
            if any(not 0 <= a < len(data["ops"]) for a in op.after) or op.dma_start >= len(data["ops"]):
                raise HexfuseError(f"{where}: schedule op {n}: a predecessor index is out of range")
            ops.append(op)
        return QnnSchedule(tuple(ops), str(data.get("graph", "")))


_COLUMNS = ("op_id", "lane", "kernel", "resource", "node", "gate", "done", "after", "vtcm_bytes", "ddr_bytes", "macs",
            "dma_start")


def _closure(n: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    """Descendant bitsets of a DAG over 0..n-1 (Python ints as bitsets; schedules hold ~10^3 ops)."""
    succ: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for a, b in edges:
        succ[a].append(b)
        indegree[b] += 1
    order, ready = [], [i for i in range(n) if indegree[i] == 0]
    while ready:
        v = ready.pop()
        order.append(v)
        for w in succ[v]:
            indegree[w] -= 1
            if indegree[w] == 0:
                ready.append(w)
    if len(order) != n:
        raise HexfuseError("the schedule's gating has a cycle: not a schedule QNN could run")
    reach = [0] * n
    for v in reversed(order):
        bits = 0
        for w in succ[v]:
            bits |= reach[w] | (1 << w)
        reach[v] = bits
    return reach
