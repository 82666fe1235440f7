"""Replay QNN's own schedule: latency of a prepared graph from its happens-before graph and per-op costs,
and of the same graph with one group fused the way the HTP package expands it.

    main thread  ──E──M0──M1──J──...        ops in list order; each starts when the thread is free and
    HVX threads  ──v──T──────v──...         its predecessors are done; HVX ops in list order on the
    DMA engine   ──w0──w1──...              first free of `hvx_contexts` threads; transfers queue on the
                                            one DMA engine in the order issued; a DMA join waits for its
                                            transfer

Costs per QNN op (``OpCosts``): an HMX op by its MACs at the target's HMX rate, an HVX op by the bytes
it moves at the HVX streaming rate, each plus a per-op constant (``qnn_hvx_op_ns`` on the HVX list,
``qnn_op_ns`` on the main thread) scaled by the op's work (``op_constant``: a 10 ns slice is not charged
what a vision convolution is), a DMA transfer by its DDR bytes at the DMA engine's rate or the sustained DDR
rate, the lower (``ddr_sustained_bytes_per_ns``: every transfer streams from the one DDR). Syncs and the run
lists' unnamed entries cost nothing of their own: their effect is the waiting, which the graph carries.
All ops share one DDR: no replay ends before the schedule's DDR bytes at the sustained bandwidth
(``ddr_floor_ns``). The constants are fitted to published phone latencies, vision and LLM rows together
(tools/bench/fit_replay.py).

The fused form (``fuse_group``) is what the expansion builds (docs/htp.md) held together by entry and
exit ordering ops, as the simulator prepares it (DESIGN.md section 5):

    preds(V) ∪ preds(M) ──> O ──> E ──> I ──> M0 .. Mk ──> X ──> J_out ──> C_out ──> readers of the group
    preds(V), E ──────────> T (one HVX op: V's work + one launch + its ports in main memory) ──> J_out

V's QNN ops become one task op T on one HVX thread, issued right after E; E and the joins J are
main-thread copies; readers of the group's outputs wait for them. Package ops take flat tensors in main
memory (DDR), not VTCM: E, T and J are priced by the bytes they read and write there, and QNN's layout
copies (O: the node's inputs out of VTCM; I: E's activation back in; X: the matrix outputs out for the
joins; C: each task output back in) by the bytes they move both ways. These are the ops and bytes the
simulator's schedule of every fused node shows (docs/schedule.md section 2). preds(M) are those of every
op of the matrix nodes (a second operand reaches the HMX ops through QNN's conversions); the joins wait
on the HMX ops and what follows them, not on weight moves. Where QNN's order has a reader before the
matrix ops or the matrix ops before a task input's producer, the ops that must move are moved (with what
depends on them), keeping every other op in QNN's order. Both graphs are replayed by the same scheduler,
so their ratio is the fusion's effect, not a scheduler's.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hexfuse.graph_passes.cost.target import Target
from hexfuse.graph_passes.engines.qnn_schedule import QnnSchedule
from hexfuse.graph_passes.errors import HexfuseError


@dataclass(frozen=True)
class OpCosts:
    """Per-op times (ns) of one schedule on one target; ``overhead`` is the part that is the per-op constant
    (``op_constant``), ``transfer`` a DMA op's time on the DMA engine; ``ddr_floor`` the schedule's DDR bytes at
    the bandwidth all its ops sustain together (no replay ends before it)."""

    run: tuple[float, ...]
    overhead: tuple[float, ...]
    transfer: tuple[float, ...]
    ddr_floor: float = 0.0


def op_constant(full_ns: float, work_ns: float, target: Target) -> float:
    """The per-op cost beyond an op's work, scaled by the work (issue 43):

        full x (f + (1 - f) x w / (w + h))       f = qnn_op_floor_fraction, h = qnn_op_half_ns

    An op with no work costs the floor share f of the constant, one of h ns half way, a large op (a vision
    convolution, 1-100 us) nearly the whole constant, which the vision fit set. f = 1: the flat constant."""
    f, h = target.qnn_op_floor_fraction, target.qnn_op_half_ns
    if f >= 1.0:
        return full_ns
    work = max(0.0, work_ns)
    return full_ns * (f + (1.0 - f) * work / (work + h))


def ddr_floor_ns(schedule: QnnSchedule, target: Target) -> float:
    """Every DDR byte the schedule moves at ddr_gbps x ddr_sustained_fraction: DMA, HVX and main-thread ops
    share one memory (a bound on the whole replay, not on any one op)."""
    return schedule.ddr_bytes / target.ddr_sustained_bytes_per_ns


def op_costs(schedule: QnnSchedule, target: Target) -> OpCosts:
    run, overhead, transfer = [], [], []
    ghz = target.clock_ghz
    per_byte = target.hvx_ns_per_byte / target.qnn_hvx_rate_scale  # QNN's own kernels (fitted)
    for op in schedule.ops:
        fixed = body = move = 0.0
        if op.resource == "hmx":
            rate = target.hmx_fp16_macs_per_cycle if "fp16" in op.kernel else target.hmx_int8_macs_per_cycle
            body = op.macs / (rate * ghz) + op.vtcm_bytes * per_byte / 4
            fixed = op_constant(target.qnn_op_ns, body, target)
        elif op.resource == "dma":
            move = op.ddr_bytes / min(target.dma_bytes_per_ns, target.ddr_sustained_bytes_per_ns) if op.dma_start < 0 else 0.0
        elif op.lane == "vec":
            body = op.vtcm_bytes * per_byte + op.ddr_bytes / target.ddr_bytes_per_ns
            fixed = op_constant(target.qnn_hvx_op_ns, body, target)
        elif op.kernel and not op.is_sync:
            body = op.vtcm_bytes * per_byte + op.ddr_bytes / target.ddr_bytes_per_ns
            fixed = op_constant(target.qnn_op_ns, body, target)
        run.append(fixed + body)
        overhead.append(fixed)
        transfer.append(move)
    return OpCosts(tuple(run), tuple(overhead), tuple(transfer), ddr_floor_ns(schedule, target))


@dataclass(frozen=True)
class Graph:
    """A schedule to replay: per op its lane, cost, predecessors, and the two list orders."""

    lanes: tuple[str, ...]
    run: tuple[float, ...]
    transfer: tuple[float, ...]
    preds: tuple[tuple[int, ...], ...]
    main: tuple[int, ...]
    vec: tuple[int, ...]
    dma_start: tuple[int, ...]
    ddr_floor: float = 0.0  # no replay of it ends before this (OpCosts.ddr_floor)


def graph_of(schedule: QnnSchedule, costs: OpCosts, gating: bool = True) -> Graph:
    """``gating``: wait as QNN's checkpoints say (exact for the schedule as prepared); else only on the
    op's own constraints (``after``: data and VTCM reuse), as a re-prepared graph would get them anew."""
    signals = schedule.signallers() if gating else {}
    preds = []
    for i, op in enumerate(schedule.ops):
        gated = signals.get(op.gate, ()) if op.gate > 0 else ()
        preds.append(tuple(sorted({*op.after, *gated} - {i})))
    return Graph(tuple(op.lane for op in schedule.ops), costs.run, costs.transfer, tuple(preds),
                 tuple(schedule.main), tuple(schedule.vec), tuple(op.dma_start for op in schedule.ops), costs.ddr_floor)


@dataclass(frozen=True)
class Replay:
    latency_ns: float  # the run lists' end, or the DDR floor where that is later
    main_busy_ns: float
    hvx_busy_ns: float
    starts: tuple[float, ...]
    ends: tuple[float, ...]
    lists_ns: float = 0.0  # when the run lists end (the schedule alone)
    ddr_floor_ns: float = 0.0

    @property
    def ddr_bound(self) -> bool:
        return self.ddr_floor_ns > self.lists_ns


def replay(graph: Graph, hvx_threads: int) -> Replay:
    n = len(graph.main) + len(graph.vec)
    start, end = [0.0] * len(graph.lanes), [-1.0] * len(graph.lanes)
    for i in set(range(len(graph.lanes))) - set(graph.main) - set(graph.vec):
        end[i] = 0.0  # an op no list runs (fused away) is nobody's wait
    transfer_end = [0.0] * len(graph.lanes)
    threads = [0.0] * max(1, hvx_threads)
    main_free = vec_last_start = dma_free = 0.0
    heads = {"main": 0, "vec": 0}
    lists = {"main": graph.main, "vec": graph.vec}
    done = 0
    while done < n:
        progressed = False
        for lane in ("main", "vec"):
            order = lists[lane]
            while heads[lane] < len(order):
                i = order[heads[lane]]
                if any(end[p] < 0 for p in graph.preds[i]) or (graph.dma_start[i] >= 0 and end[graph.dma_start[i]] < 0):
                    break
                ready = max((end[p] for p in graph.preds[i]), default=0.0)
                if graph.dma_start[i] >= 0:
                    ready = max(ready, transfer_end[graph.dma_start[i]])
                if lane == "main":
                    start[i] = max(main_free, ready)
                    end[i] = main_free = start[i] + graph.run[i]
                    transfer_end[i] = end[i]
                    if graph.transfer[i]:  # a DMA start queues its transfer on the one DMA engine
                        transfer_end[i] = dma_free = max(end[i], dma_free) + graph.transfer[i]
                else:
                    t = min(range(len(threads)), key=threads.__getitem__)
                    start[i] = max(threads[t], ready, vec_last_start)
                    end[i] = threads[t] = start[i] + graph.run[i]
                    vec_last_start = start[i]
                heads[lane] += 1
                done += 1
                progressed = True
        if not progressed:
            raise HexfuseError("replay: the run lists wait on each other (the schedule is not runnable)")
    busy = lambda lane: sum(graph.run[i] for i in lists[lane])  # noqa: E731
    lists_end = max(max(end, default=0.0), max(transfer_end, default=0.0))
    return Replay(max(lists_end, graph.ddr_floor), busy("main"), busy("vec"), tuple(start), tuple(end), lists_end,
                  graph.ddr_floor)


# --- the fused form -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Group:
    """One candidate group on the schedule: its matrix task's nodes, its other tasks' nodes, and the bytes
    its package ops and QNN's copies for them move (stored widths: codes for a QDQ port)."""

    matrix_nodes: frozenset[str]
    task_nodes: tuple[frozenset[str], ...]  # one set per task op
    port_bytes: tuple[int, ...]  # per task op: bytes of its inputs + outputs
    task_output_bytes: tuple[int, ...]  # per task output: what its join copies
    input_bytes: int = 0  # the node's non-constant inputs: what the entry waits on
    carrier_bytes: int = 0  # the activation the entry copies into the matrix work
    matrix_output_bytes: int = 0  # the matrix work's outputs, which the joins wait on


class Unholdable(HexfuseError):
    """The group cannot be held together: QNN's own constraints order part of it after the rest."""


@dataclass(frozen=True)
class FusedForm:
    graph: Graph
    task_ns: float  # the task ops' run time (what overlap could hide at most)
    added_ns: float  # ordering ops, copies and launches the fused form adds
    moved: int  # ops moved out of QNN's order (either list) to hold the group together
    parts: dict[str, tuple[int, ...]]  # the ops it adds, by role (_Priced's names): indices into graph


def _task_ops(schedule: QnnSchedule, group: Group) -> list[list[int]]:
    """Per task op of ``group``: the schedule's ops it takes over (a task's DMA ops stay QNN's)."""
    ops = schedule.ops
    return [[i for i, op in enumerate(ops) if op.node in nodes and op.resource != "dma"] for nodes in group.task_nodes]


def _main_memory_ns(target: Target, nbytes: int) -> float:
    return nbytes / target.ddr_bytes_per_ns


def _copy_ns(target: Target, nbytes: int) -> float:
    """One of QNN's layout copies between VTCM and main memory (flat_from_vtcm, flat_to_vtcm), priced as
    op_costs prices it in the simulator's schedule: the bytes at the HVX rate and through DDR."""
    if nbytes <= 0:
        return 0.0
    # (flat, as first fitted: what holding a group together adds is priced as before issue 43, so that the pass
    # decides as it did; the size-scaled constant and rate scale are fitted for QNN's own ops)
    return target.qnn_hvx_op_ns + nbytes * target.hvx_ns_per_byte + _main_memory_ns(target, nbytes)


@dataclass(frozen=True)
class Expansion:
    """What holding a group together adds around its work, each op its run time (module docstring: O, E,
    I, X, J, C), priced from the group's bytes alone: the same prices with QNN's schedule or without."""

    copies_out: float
    entry: float
    carrier_in: float
    matrix_out: float
    ports: tuple[float, ...]  # per task op: its ports and the entry's copy in main memory (launch apart)
    joins: tuple[float, ...]  # per task output (one join where no task output is read)
    outputs_in: tuple[float, ...]

    @property
    def total_ns(self) -> float:
        return (self.copies_out + self.entry + self.carrier_in + self.matrix_out + sum(self.ports) + sum(self.joins)
                + sum(self.outputs_in))


def expansion(target: Target, group: Group) -> Expansion:
    joined = group.task_output_bytes or (0,)

    def main_op(nbytes: int) -> float:  # a package op on the main thread (flat constant: _copy_ns)
        return target.qnn_op_ns + _main_memory_ns(target, nbytes)

    return Expansion(
        copies_out=_copy_ns(target, group.input_bytes),
        entry=main_op(group.input_bytes + group.carrier_bytes),
        carrier_in=_copy_ns(target, group.carrier_bytes),
        matrix_out=_copy_ns(target, group.matrix_output_bytes),
        # the task op reads the entry's copy too (its _e variant)
        ports=tuple(_main_memory_ns(target, port + group.carrier_bytes) for port in group.port_bytes),
        joins=tuple(main_op(2 * b + group.matrix_output_bytes) for b in joined),
        outputs_in=tuple(_copy_ns(target, b) for b in joined))


@dataclass(frozen=True)
class _Priced:
    """The fused form's ops, each its run time: the expansion's, and the task ops'."""

    tasks: tuple[float, ...]  # per task op: its QNN ops' work, one launch, its ports in main memory
    added: Expansion
    task_ns: float  # the task ops' work: what overlap could hide at most
    added_ns: float  # all the rest


def _priced(costs: OpCosts, target: Target, tasks: list[list[int]], group: Group) -> _Priced:
    work = [sum(costs.run[i] - costs.overhead[i] for i in members) for members in tasks]
    added = expansion(target, group)
    task_extra = [target.qnn_hvx_op_ns + port for port in added.ports]  # a launch each, and its ports
    return _Priced(tuple(w + e for w, e in zip(work, task_extra)), added, sum(work),
                   added.total_ns + target.qnn_hvx_op_ns * len(task_extra))


def fused_costs(schedule: QnnSchedule, costs: OpCosts, target: Target, group: Group) -> tuple[float, float] | None:
    """The fused form's (task_ns, added_ns) as fuse_group prices it, without building the form (overlap
    saves at most task_ns - added_ns). None where a task op would take over no op."""
    tasks = _task_ops(schedule, group)
    if not all(tasks):
        return None
    priced = _priced(costs, target, tasks, group)
    return priced.task_ns, priced.added_ns


def fuse_group(schedule: QnnSchedule, costs: OpCosts, target: Target, group: Group,
               base: tuple[Graph, Replay] | None = None) -> FusedForm | None:
    """The graph with ``group`` fused as the HTP package expands it; None when the schedule has no
    HMX op of the matrix task or no op of a task (nothing to hold together). ``base``: the original's
    data-only graph and its replay, when the caller has them."""
    if base is None:
        graph = graph_of(schedule, costs, gating=False)  # checkpoints are QNN's and change with the graph
        base = graph, replay(graph, target.hvx_contexts)
    base_graph, before = base
    ops = schedule.ops
    matrix = [i for i in schedule.main if ops[i].node in group.matrix_nodes and ops[i].resource == "hmx"]
    tasks = _task_ops(schedule, group)
    if not matrix or not all(tasks):
        return None
    removed = {i for task in tasks for i in task}
    matrix_all = {i for i, op in enumerate(ops) if op.node in group.matrix_nodes}  # with its helpers and moves
    inside = removed | matrix_all
    lanes, run, transfer = list(base_graph.lanes), list(base_graph.run), list(base_graph.transfer)
    preds = [set(p) for p in base_graph.preds]
    dma_start = list(base_graph.dma_start)
    # one order for both lanes (so that in-order lanes cannot wait on each other): QNN's, as replayed
    rank = {i: (before.starts[i], k) for k, i in enumerate((*base_graph.main, *base_graph.vec))}

    labels = {i: f"{op.kernel or 'op'} ({op.node or 'QNN'})" for i, op in enumerate(ops)}

    def add(lane: str, cost: float, waits: Iterable[int], position: tuple[float, int], label: str) -> int:
        labels[len(lanes)] = label
        lanes.append(lane)
        run.append(cost)
        transfer.append(0.0)
        preds.append(set(waits))
        dma_start.append(-1)
        rank[len(lanes) - 1] = position
        return len(lanes) - 1

    outer_preds = lambda members: {p for i in members for p in preds[i]} - inside  # noqa: E731
    first_matrix = rank[matrix[0]]
    priced = _priced(costs, target, tasks, group)
    # the entry waits on every input of the node: the task ops' and all of the matrix work's (its helpers'
    # too: a second operand reaches the HMX ops through QNN's layout and weight conversions), each copied
    # out of VTCM first
    inputs = outer_preds(removed) | outer_preds(matrix_all)
    at_entry = (first_matrix[0], first_matrix[1] - 1)
    copies_out = add("vec", priced.added.copies_out, inputs, at_entry, "copies of the inputs out of VTCM")
    entry = add("main", priced.added.entry, inputs | {copies_out}, at_entry, "the entry op")
    task_ops = []
    for members, cost in zip(tasks, priced.tasks):
        # the task op reads the entry too (op_package/htp_expand.py, concurrent mode): QNN issues it right
        # after it (in the simulator its gate is the entry's own @Sync); equal ranks keep the order added
        task_ops.append(add("vec", cost, outer_preds(members) | {entry}, rank[entry], "the task op"))
    carrier_in = add("vec", priced.added.carrier_in, {entry}, rank[entry], "the entry's copy back into VTCM")
    for i in matrix:  # QNN's slices of the matrix op all read the activation through the entry
        preds[i] |= {entry, carrier_in}
    # The joins wait on the results: the HMX ops and what QNN does with their outputs (layout copies), not
    # on what the matrix work reads (weight and bias moves, operand conversions: QNN moves the weights of
    # several nodes in one op, attributed to one of them) nor on the node's empty run-list entries (placed
    # anywhere, up to hundreds of us later). Readers of results wait for the joins' outputs back in VTCM;
    # a reader of the moved weights is no reader of the group (else a cycle through the join; the
    # simulator holds such groups).
    made = _made(matrix, matrix_all, preds)
    last = max(made, key=lambda i: before.ends[i])
    at_exit = (before.ends[last], rank[last][1] + 1)
    matrix_out = add("vec", priced.added.matrix_out, made, at_exit, "the matrix outputs out of VTCM")
    joins, outputs_in = [], []
    for cost_join, cost_in in zip(priced.added.joins, priced.added.outputs_in):
        joins.append(add("main", cost_join, {*made, *task_ops, matrix_out}, at_exit, "a join"))
        outputs_in.append(add("vec", cost_in, {joins[-1]}, at_exit, "a join's output back into VTCM"))
    results = made | removed
    for i in range(len(ops)):
        if i not in inside and preds[i] & results:
            preds[i] = (preds[i] - results) | set(outputs_in)
    order, moved = _stable_order([i for i in range(len(lanes)) if i not in removed], preds, rank, labels)
    main = [i for i in order if lanes[i] == "main"]
    vec = [i for i in order if lanes[i] == "vec"]
    # indices stay those of the original ops; fused-away ones keep a slot no list runs and nobody waits on
    graph = Graph(tuple(lanes), tuple(run), tuple(transfer), tuple(tuple(sorted(p - removed)) for p in preds),
                  tuple(main), tuple(vec), tuple(dma_start), base_graph.ddr_floor)
    parts = {"copies_out": (copies_out,), "entry": (entry,), "tasks": tuple(task_ops), "carrier_in": (carrier_in,),
             "matrix_out": (matrix_out,), "joins": tuple(joins), "outputs_in": tuple(outputs_in)}
    return FusedForm(graph, priced.task_ns, priced.added_ns, moved, parts)


def _made(sources: Sequence[int], members: set[int], preds: Sequence[set[int]]) -> set[int]:
    """``sources`` and the ``members`` that wait on one of them, directly or through other members."""
    found = set(sources)
    rest = sorted(members - found)
    grown = True
    while grown:
        grown = False
        for i in rest:
            if i not in found and preds[i] & found:
                found.add(i)
                grown = True
    return found


def _stable_order(members: Sequence[int], preds: Sequence[set[int]], rank: dict[int, tuple[float, int]],
                  labels: dict[int, str]) -> tuple[list[int], int]:
    """A topological order of ``members`` (dependencies through any op) closest to their ranks; how many
    ops it moved against that rank order."""
    wanted = sorted(members, key=rank.__getitem__)
    member = set(members)
    # dependencies between members, through non-members too
    memo: dict[int, frozenset[int]] = {}

    def member_preds(i: int) -> frozenset[int]:
        found = memo.get(i)
        if found is not None:
            return found
        out: set[int] = set()
        stack, seen = list(preds[i]), set()
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            if p in member:
                out.add(p)
            else:
                stack.extend(preds[p])
        memo[i] = frozenset(out)
        return memo[i]

    waiting = {i: set(member_preds(i)) for i in wanted}
    users: dict[int, list[int]] = {}
    for i, ps in waiting.items():
        for p in ps:
            users.setdefault(p, []).append(i)
    heap = [(rank[i], i) for i in wanted if not waiting[i]]
    heapq.heapify(heap)
    order = []
    while heap:
        _, i = heapq.heappop(heap)
        order.append(i)
        for u in users.get(i, ()):
            waiting[u].discard(i)
            if not waiting[u]:
                heapq.heappush(heap, (rank[u], u))
    if len(order) != len(wanted):
        raise Unholdable(_cycle(waiting, labels))
    return order, _moved(order, rank)


def _cycle(waiting: dict[int, set[int]], labels: dict[int, str]) -> str:
    """One chain of ops that wait on each other, in happens-before order ('a -> b -> ... -> a')."""
    node = next(i for i, ps in waiting.items() if ps)
    path: list[int] = []
    while node not in path:
        path.append(node)
        node = min(waiting[node])  # any op it still waits on is itself stuck
    loop = path[path.index(node):]
    return " -> ".join(labels[i] for i in reversed([*loop, loop[0]]))


def _moved(order: list[int], rank: dict[int, tuple[float, int]]) -> int:
    """Ops out of their old relative order: those off a longest run kept in rank order."""
    tails: list[tuple[float, int]] = []
    for i in order:
        k = bisect.bisect_left(tails, rank[i])
        tails[k:k + 1] = [rank[i]]
    return len(order) - len(tails)
