"""QNN's schedule as a happens-before graph (graph_passes/engines/qnn_schedule.py), its replay and the fused form
(graph_passes/cost/replay.py), and the HTP decision taken from it (graph_passes/cost/schedule_verdict.py).

Small hand-made schedules check the semantics against answers worked out by hand from their costs; the
committed engine maps (QNN's own schedules of the bundled models, prepared in the HTP simulator) check
that the reading holds on real schedules and that the decision is the measured one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hexfuse.cli import main
from hexfuse.graph_passes.cost.replay import (Group, OpCosts, Unholdable, fuse_group, fused_costs, graph_of, op_constant, op_costs,
                                               replay)
from hexfuse.graph_passes.engines.engine_map import engine_map_from_json, load_engine_map
from hexfuse.graph_passes.engines.qnn_schedule import QnnSchedule, ScheduledOp
from hexfuse.graph_passes.errors import HexfuseError
from tests.cost.specs import estimated

ROOT = Path(__file__).resolve().parents[2]
MAPS = sorted((ROOT / "models" / "engines").glob("*.json"))
# pinned figures (the pre-fit estimates), so that what these tests work out by hand does not move with a fit
TARGET = estimated("sm8650").with_values(qnn_op_ns=1500.0, qnn_hvx_op_ns=300.0, qnn_op_floor_fraction=1.0,
                                         qnn_hvx_rate_scale=1.0)  # flat per-op constants (tests/cost/test_op_scaling.py)


def op(lane: str, kernel: str, resource: str, node: str = "", gate: int = -1, done: int = -1, after=(), macs: int = 0,
       vtcm: int = 0, ddr: int = 0, dma_start: int = -1) -> ScheduledOp:
    return ScheduledOp(0, lane, kernel, resource, node, gate, done, tuple(after), vtcm, ddr, macs, dma_start)


def flat_costs(schedule: QnnSchedule, run: dict[int, float], transfer: dict[int, float] | None = None) -> OpCosts:
    n = len(schedule.ops)
    return OpCosts(tuple(run.get(i, 0.0) for i in range(n)), (0.0,) * n, tuple((transfer or {}).get(i, 0.0) for i in range(n)))


# --- the happens-before graph --------------------------------------------------------------------
def _pair(task_gate: int) -> QnnSchedule:
    """main: producer P (done 1), matrix M (done 2), reader R (gate 3); vec: V gated on task_gate, done 3."""
    return QnnSchedule((
        op("main", "Producer", "main", "p", done=1),
        op("main", "ConvLayer_s1.opt", "hmx", "m", done=2, after=(0,)),
        op("main", "Reader", "main", "r", gate=3, after=(3,)),
        op("vec", "Softmax", "hvx", "v", gate=task_gate, done=3, after=(0,)),
    ))


def test_two_ops_may_overlap_exactly_when_neither_reaches_the_other() -> None:
    free, ordered = _pair(1), _pair(2)  # V waits for P only / for M too
    assert not free.ordered(1, 3) and ordered.ordered(1, 3)
    assert free.ordered(0, 3) and free.ordered(3, 2)  # P before V, V before R (its gate)
    assert free.counts()["hvx_hmx_pairs"] == 1 and ordered.counts()["hvx_hmx_pairs"] == 0
    assert free.counts()["hvx_beside_hmx"] == 1 and ordered.counts()["hvx_beside_hmx"] == 0


def test_a_gate_nobody_signals_and_checkpoint_zero_are_no_wait() -> None:
    schedule = QnnSchedule((op("main", "A", "main", done=0), op("vec", "B", "hvx", gate=0), op("vec", "C", "hvx", gate=7)))
    assert schedule.gating_edges() == []
    cycle = QnnSchedule((op("main", "A", "main", gate=2, done=1), op("vec", "B", "hvx", gate=1, done=2)))
    with pytest.raises(HexfuseError, match="cycle"):
        cycle.reach()


def test_schedule_json_round_trip_and_bad_rows() -> None:
    schedule = _pair(1)
    again = QnnSchedule.from_json(json.loads(json.dumps(schedule.to_json())), "here")
    assert again.ops == schedule.ops
    data = schedule.to_json()
    data["ops"][1][7] = [99]
    with pytest.raises(HexfuseError, match="out of range"):
        QnnSchedule.from_json(data, "here")
    data = schedule.to_json()
    data["ops"][0][1] = "gpu"
    with pytest.raises(HexfuseError, match="lane 'gpu'"):
        QnnSchedule.from_json(data, "here")


# --- replay ---------------------------------------------------------------------------------------
def test_replay_runs_main_in_order_and_vec_beside_it() -> None:
    free, ordered = _pair(1), _pair(2)
    run = {0: 1.0, 1: 10.0, 2: 1.0, 3: 6.0}
    # free: P 0-1, M 1-11, V 1-7 beside M, R waits for V and the thread: 11-12
    assert replay(graph_of(free, flat_costs(free, run)), 4).latency_ns == pytest.approx(12.0)
    # ordered: V after M (11-17), R 17-18
    assert replay(graph_of(ordered, flat_costs(ordered, run)), 4).latency_ns == pytest.approx(18.0)


def test_replay_shares_hvx_threads_in_list_order_and_waits_for_dma() -> None:
    vec = QnnSchedule(tuple(op("vec", "V", "hvx") for _ in range(3)))
    costs = flat_costs(vec, {0: 4.0, 1: 4.0, 2: 4.0})
    assert replay(graph_of(vec, costs), 2).latency_ns == pytest.approx(8.0)  # two threads: 4 + 4
    assert replay(graph_of(vec, costs), 3).latency_ns == pytest.approx(4.0)
    dma = QnnSchedule((op("main", "w_to_vtcm", "dma"), op("main", "Other", "main"),
                       op("main", "w_to_vtcm", "dma", after=(0,), dma_start=0)))
    costs = flat_costs(dma, {0: 1.0, 1: 1.0, 2: 1.0}, {0: 10.0})
    assert replay(graph_of(dma, costs), 1).latency_ns == pytest.approx(12.0)  # the join waits for the transfer (1 + 10)


def test_transfers_queue_on_the_one_dma_engine() -> None:
    # two weight moves issued back to back: the second starts when the first is done (one DDR, one engine),
    # so the second join waits 1 + 10 + 10, not 2 + 10
    two = QnnSchedule((op("main", "w_to_vtcm", "dma"), op("main", "w_to_vtcm", "dma"),
                       op("main", "w_to_vtcm", "dma", after=(0,), dma_start=0),
                       op("main", "w_to_vtcm", "dma", after=(1,), dma_start=1)))
    costs = flat_costs(two, {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}, {0: 10.0, 1: 10.0})
    replayed = replay(graph_of(two, costs), 1)
    assert replayed.starts[3] == pytest.approx(21.0) and replayed.latency_ns == pytest.approx(22.0)
    # a transfer issued after the engine went idle starts at once
    late = QnnSchedule((op("main", "w_to_vtcm", "dma"), op("main", "Other", "main"), op("main", "w_to_vtcm", "dma"),
                        op("main", "w_to_vtcm", "dma", after=(2,), dma_start=2)))
    costs = flat_costs(late, {0: 1.0, 1: 20.0, 2: 1.0, 3: 1.0}, {0: 10.0, 2: 10.0})
    assert replay(graph_of(late, costs), 1).starts[3] == pytest.approx(32.0)  # 22 + 10

def test_op_costs_price_hmx_by_macs_and_hvx_by_bytes() -> None:
    schedule = QnnSchedule((op("main", "ConvLayer_s1.opt", "hmx", macs=10**6), op("vec", "Softmax", "hvx", vtcm=4096),
                            op("main", "@Sync", "main"), op("main", "", "main")))
    flat = TARGET.with_values(qnn_op_floor_fraction=1.0, qnn_hvx_rate_scale=1.0)  # the constants as first fitted
    costs = op_costs(schedule, flat)
    assert costs.run[0] == pytest.approx(flat.qnn_op_ns + 10**6 / (flat.hmx_int8_macs_per_cycle * flat.clock_ghz))
    assert costs.run[1] == pytest.approx(flat.qnn_hvx_op_ns + 4096 * flat.hvx_ns_per_byte)
    assert costs.run[2] == 0.0 and costs.run[3] == 0.0  # waits and unnamed entries: the graph carries them
    assert costs.overhead[:2] == (flat.qnn_op_ns, flat.qnn_hvx_op_ns)
    # as fitted (issue 43): QNN's HVX kernels stream qnn_hvx_rate_scale times the estimate, the constant scales
    fitted = op_costs(schedule, TARGET)
    work = 4096 * TARGET.hvx_ns_per_byte / TARGET.qnn_hvx_rate_scale
    assert fitted.run[1] == pytest.approx(work + op_constant(TARGET.qnn_hvx_op_ns, work, TARGET))


# --- the fused form -------------------------------------------------------------------------------
def _ordered_group(vector_vtcm: int) -> tuple[QnnSchedule, Group]:
    """QNN orders V after the matrix op M (a constraint of its own, VTCM reuse say), though V reads only P."""
    schedule = QnnSchedule((
        op("main", "Producer", "main", "p", done=1),
        op("main", "ConvLayer_s1.opt", "hmx", "m", done=2, after=(0,), macs=64 * 10**6),
        op("main", "Reader", "main", "r", gate=3, after=(3, 1)),
        op("vec", "Softmax", "hvx", "v", gate=2, done=3, after=(0, 1), vtcm=vector_vtcm),
    ))
    return schedule, _group()


def _group(port: int = 1024) -> Group:
    """m and v both read P's output (1 KiB, the entry's activation); each writes 1 KiB."""
    return Group(frozenset({"m"}), (frozenset({"v"}),), (port,), (1024,), input_bytes=1024, carrier_bytes=1024,
                 matrix_output_bytes=1024)


def test_fusing_puts_the_task_op_beside_its_matrix_op_and_prices_the_edges() -> None:
    schedule, group = _ordered_group(4 * 2**20)  # a big vector task: tens of us
    costs = op_costs(schedule, TARGET)
    original = replay(graph_of(schedule, costs, gating=False), TARGET.hvx_contexts).latency_ns
    fused = fuse_group(schedule, costs, TARGET, group)
    assert fused is not None and fused.task_ns == pytest.approx(costs.run[3] - costs.overhead[3])
    assert fused_costs(schedule, costs, TARGET, group) == (fused.task_ns, fused.added_ns)
    assert fused.task_ns > fused.added_ns  # the judge replays this one
    # package ops in main memory (DDR): the entry reads P's output and writes its copy, the task op reads
    # its ports and the entry's copy, the join reads and writes V's output and reads M's; QNN's four layout
    # copies (P's output out of VTCM, the entry's copy, M's output and the join's back in) move 1 KiB each
    ddr = 1 / TARGET.ddr_bytes_per_ns
    copy = TARGET.qnn_hvx_op_ns + 1024 * (TARGET.hvx_ns_per_byte + ddr)
    assert fused.added_ns == pytest.approx(TARGET.qnn_op_ns + 2048 * ddr + TARGET.qnn_hvx_op_ns + 2048 * ddr
                                           + TARGET.qnn_op_ns + 3072 * ddr + 4 * copy)
    after = replay(fused.graph, TARGET.hvx_contexts)
    assert after.latency_ns < original
    (entry,), (task_op,) = fused.parts["entry"], fused.parts["tasks"]
    assert entry in fused.graph.preds[task_op] and after.starts[task_op] >= after.ends[entry]  # the task op reads it
    reader = 2
    assert after.starts[reader] >= max(after.ends[i] for i in fused.parts["outputs_in"])
    assert fused.parts["joins"][0] in fused.graph.preds[fused.parts["outputs_in"][0]]


def test_the_added_ops_cost_what_op_costs_gives_them_in_a_prepared_fused_graph() -> None:
    """In the simulator's schedule of a fused model the entry, task op and join read and write their
    tensors in DDR (vtcm 0, ddr = their ports) and QNN's layout copies move their bytes both ways (vtcm =
    ddr = the bytes): the fused form prices each as op_costs prices that op (on the 26 fused nodes
    prepared in the simulator the prices match the simulator's to 0.1 us, docs/schedule.md section 2)."""
    schedule, _ = _ordered_group(4 * 2**20)
    group = Group(frozenset({"m"}), (frozenset({"v"}),), (5000,), (3000, 700), input_bytes=4000, carrier_bytes=1000,
                  matrix_output_bytes=600)
    costs = op_costs(schedule, TARGET)
    fused = fuse_group(schedule, costs, TARGET, group)
    assert fused is not None
    work = costs.run[3] - costs.overhead[3]
    prepared = {  # role -> the op as the simulator's schematic shows it
        "entry": [op("main", "HexFuse_0__enter", "main", ddr=4000 + 1000)],
        "tasks": [op("vec", "HexFuse_0__t1_e", "hvx", ddr=5000 + 1000)],
        "joins": [op("main", "HexFuse_0__join", "main", ddr=2 * b + 600) for b in (3000, 700)],
        "copies_out": [op("vec", "flat_from_vtcm", "hvx", vtcm=4000, ddr=4000)],
        "carrier_in": [op("vec", "flat_to_vtcm", "hvx", vtcm=1000, ddr=1000)],
        "matrix_out": [op("vec", "flat_from_vtcm", "hvx", vtcm=600, ddr=600)],
        "outputs_in": [op("vec", "flat_to_vtcm", "hvx", vtcm=b, ddr=b) for b in (3000, 700)],
    }
    for role, ops in prepared.items():
        priced = op_costs(QnnSchedule(tuple(ops)), TARGET).run
        run = [fused.graph.run[i] - (work if role == "tasks" else 0.0) for i in fused.parts[role]]
        assert run == pytest.approx(priced), role
    assert fused.added_ns == pytest.approx(sum(fused.graph.run[len(schedule.ops):]) - work)


def test_the_entry_waits_for_the_matrix_works_second_operand() -> None:
    """The matrix op M multiplies P's output by S's, which reaches M through a layout helper H of M's own
    node (QNN's weight conversions of a dynamic operand): the entry, and so the task op, waits for S,
    as the expansion's entry does (op_package/htp_expand.py), not only for what M reads directly."""
    schedule = QnnSchedule((
        op("main", "Producer", "main", "p", done=1),
        op("main", "Second", "main", "s", done=2),
        op("vec", "ForceFormat_Crouton", "hvx", "m", gate=2, done=3, after=(1,)),
        op("main", "ConvLayer_s1.opt", "hmx", "m", gate=3, done=4, after=(0, 2), macs=64 * 10**6),
        op("vec", "Softmax", "hvx", "v", gate=1, done=5, after=(0,), vtcm=4 * 2**20),
    ))
    costs = op_costs(schedule, TARGET)
    fused = fuse_group(schedule, costs, TARGET, _group())
    assert fused is not None
    (copies,), (entry,), (task_op,) = fused.parts["copies_out"], fused.parts["entry"], fused.parts["tasks"]
    assert fused.graph.preds[copies] == (0, 1)  # P (the task's and M's input) and S (through the helper)
    assert fused.graph.preds[entry] == (0, 1, copies)
    after = replay(fused.graph, TARGET.hvx_contexts)
    assert after.starts[task_op] >= after.ends[1]


def test_every_slice_of_the_matrix_op_waits_for_the_entry() -> None:
    """QNN slices a MatMul into several HMX ops; each reads the activation, which comes through the entry."""
    schedule = QnnSchedule((
        op("main", "Producer", "main", "p", done=1),
        op("main", "ConvLayer_s1.opt", "hmx", "m", done=2, after=(0,), macs=32 * 10**6),
        op("main", "ConvLayer_s1.opt", "hmx", "m", done=3, after=(0,), macs=32 * 10**6),
        op("vec", "Softmax", "hvx", "v", gate=1, done=4, after=(0,), vtcm=4 * 2**20),
    ))
    fused = fuse_group(schedule, op_costs(schedule, TARGET), TARGET, _group())
    assert fused is not None
    through = {*fused.parts["entry"], *fused.parts["carrier_in"]}  # the entry's copy, back in VTCM
    assert through <= set(fused.graph.preds[1]) and through <= set(fused.graph.preds[2])


def test_a_shared_weight_move_and_an_empty_entry_are_not_results_of_the_group() -> None:
    """QNN moves the weights of two nodes in one op W, attributed to m; n's matrix op N reads it, and the
    task reads N's output through X. N is no reader of the group (waiting for its joins would close a
    cycle: entry -> M -> join -> N -> X -> entry; the simulator holds such groups), and the joins do
    not wait for m's empty run-list entry E, placed late."""
    schedule = QnnSchedule((
        op("main", "ConvLayer.opt.weights_to_vtcm", "main", "m", done=1),
        op("main", "ConvLayer_s1.opt", "hmx", "n", done=2, after=(0,), macs=10**6),
        op("main", "X", "main", "x", done=3, after=(1,)),
        op("main", "ConvLayer_s1.opt", "hmx", "m", done=4, after=(0,), macs=64 * 10**6),
        op("main", "Reader", "main", "r", after=(3, 7)),
        op("main", "", "main", "m"),
        op("main", "Later", "main", "l", done=5),
        op("vec", "Softmax", "hvx", "v", gate=3, done=6, after=(2,), vtcm=4 * 2**20),
    ))
    fused = fuse_group(schedule, op_costs(schedule, TARGET), TARGET, _group())  # (it raised Unholdable: N waited for the joins)
    assert fused is not None
    joins = fused.parts["joins"]
    assert fused.graph.preds[1] == (0,)  # N still reads the moved weights only
    assert all(5 not in fused.graph.preds[j] and 0 not in fused.graph.preds[j] for j in joins)
    assert set(fused.graph.preds[4]) == set(fused.parts["outputs_in"])  # R read M and V: it waits for the joins
    after = replay(fused.graph, TARGET.hvx_contexts)
    assert after.starts[4] < after.starts[6]  # R keeps its place before the later op


def test_the_task_op_is_issued_right_after_the_entry() -> None:
    """V reads only P but was listed behind U and U2, which wait for Q, listed after the matrix op M on the
    main thread; the task op is issued after the entry (in the simulator its gate is the entry's own
    @Sync), not in V's old place behind them: it runs beside M."""
    schedule = QnnSchedule((
        op("main", "Producer", "main", "p", done=1),
        op("main", "ConvLayer_s1.opt", "hmx", "m", done=2, after=(0,), macs=64 * 10**6),
        op("main", "Other", "main", "q", done=3),
        op("vec", "Unrelated", "hvx", "u", gate=3, done=4, after=(2,), vtcm=2**20),
        op("vec", "Unrelated", "hvx", "u2", gate=4, done=5, after=(3,), vtcm=2**20),
        op("vec", "Softmax", "hvx", "v", gate=1, done=6, after=(0,), vtcm=4 * 2**20),
    ))
    fused = fuse_group(schedule, op_costs(schedule, TARGET), TARGET, _group())
    assert fused is not None
    (task_op,) = fused.parts["tasks"]
    assert fused.graph.vec.index(task_op) < fused.graph.vec.index(3)
    after = replay(fused.graph, TARGET.hvx_contexts)
    assert after.starts[task_op] < after.ends[1]  # beside M


def test_fusing_a_small_task_costs_more_than_it_hides() -> None:
    schedule, group = _ordered_group(1024)
    costs = op_costs(schedule, TARGET)
    original = replay(graph_of(schedule, costs, gating=False), TARGET.hvx_contexts).latency_ns
    fused = fuse_group(schedule, costs, TARGET, group)
    assert fused is not None and fused.added_ns > fused.task_ns
    assert replay(fused.graph, TARGET.hvx_contexts).latency_ns > original


def test_a_group_qnn_orders_around_itself_cannot_be_held_together() -> None:
    """The task's input comes from an op QNN orders after the group's matrix op: entry and exit would wait
    on each other."""
    schedule = QnnSchedule((
        op("main", "ConvLayer_s1.opt", "hmx", "m", done=1),
        op("main", "ConvLayer_s1.opt", "hmx", "q", done=2, after=(0,)),  # QNN orders q after m (a shared weight, say)
        op("vec", "Rope", "hvx", "v", gate=2, after=(1,)),
    ))
    costs = op_costs(schedule, TARGET)
    with pytest.raises(Unholdable, match=r"the entry op -> ConvLayer_s1\.opt \(m\) -> a join -> a join's output back into VTCM "
                                          r"-> ConvLayer_s1\.opt \(q\)"):
        fuse_group(schedule, costs, TARGET, _group(64))


# --- real schedules (committed engine maps) -------------------------------------------------------
@pytest.mark.parametrize("path", MAPS, ids=lambda p: p.stem)
def test_committed_maps_hold_a_consistent_schedule(path: Path) -> None:
    engine_map = load_engine_map(path)
    schedule = engine_map.schedule
    assert schedule is not None and schedule.counts()["hmx"] > 0
    reach = schedule.reach()
    # every data predecessor the op table names is already ordered before its op by the gating
    assert all(reach[a] >> i & 1 for i, o in enumerate(schedule.ops) for a in o.after)
    named = {o.node for o in schedule.ops if o.node}
    assert named and named <= set(engine_map.nodes) | set(engine_map.absent)  # ops are attributed to nodes of the model
    flat = TARGET.with_values(qnn_op_floor_fraction=1.0, qnn_hvx_rate_scale=1.0)  # as measured (before issue 43)
    costs = op_costs(schedule, flat)
    gated = replay(graph_of(schedule, costs), TARGET.hvx_contexts).latency_ns
    data_only = replay(graph_of(schedule, costs, gating=False), TARGET.hvx_contexts).latency_ns
    assert 0 < data_only <= gated * 1.0001  # QNN's gates add waits, never remove them
    assert data_only >= 0.9 * gated  # and the op table's own constraints explain nearly all of them
    assert engine_map_from_json(engine_map.to_json(), "again").schedule.ops == schedule.ops  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["gptj_block_qdq", "llama_prefill_decode_qdq"])
def test_on_the_bundled_lms_the_replay_fuses_nothing_and_says_why(capsys, name: str) -> None:
    """Measured (issue 19): their vector tasks are 0.03-0.5 us against 5 us of ordering ops, copies and
    launches, or QNN already runs them beside the HMX ops, or QNN's own order cannot be held."""
    assert main(["analyze", str(ROOT / "models" / f"{name}.onnx"), "--target", "sm8650", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["groups"] == []
    schedule = data["summary"]["schedule"]
    assert schedule["replay_us"] > 0 and schedule["hvx_beside_hmx"] > 0 and schedule["saved_us"] == 0
    scored = [row for row in data["not_fused"]["by_kind"] if "rejected by the scorer" in row["kind"]]
    assert scored and all(any(why in row["example"] for why in ("QNN's schedule", "QNN already overlaps",
                                                                "cannot be held together")) for row in scored)
    # the estimated model agrees once it prices the package as built; the design's fused node it would fuse
    estimated = ["analyze", str(ROOT / "models" / f"{name}.onnx"), "--target", "sm8650", "--ignore-schedule", "--json"]
    assert main(estimated) == 0
    assert json.loads(capsys.readouterr().out)["groups"] == []
    assert main([*estimated, "--as-designed"]) == 0
    assert json.loads(capsys.readouterr().out)["groups"]


def test_the_figures_docs_schedule_quotes_are_what_the_tools_print(capsys) -> None:
    """docs/schedule.md quotes tools/bench/replay_table.py (section 4) and the schedules' counts (section 1):
    a change that moves a figure fails here, so the page cannot drift."""
    import re
    import sys

    sys.path.insert(0, str(ROOT / "tools" / "bench"))
    try:
        import replay_table
    finally:
        sys.path.pop(0)
    assert replay_table.main([]) == 0
    printed = capsys.readouterr().out
    doc = (ROOT / "docs" / "schedule.md").read_text(encoding="utf-8")
    checked = 0
    for line in printed.splitlines():
        found = re.match(r"(\w+): the estimates pick (\d+) groups, the replay accepts (\d+); (\d+) can be held together; "
                         r"(?:fused/original ([\d.]+)-([\d.]+))?", line)
        if not found:
            continue
        name, picked, accepted, held, low, high = found.groups()
        spread = f"{low}–{high}" if low else "—"
        t2 = next(row for row in printed.splitlines() if row.startswith(f"| {name} |")).split("|")[4].strip()
        cannot = int(picked) - int(held)
        picked_cell = picked + (f" ({cannot} cannot be held together)" if cannot else "")
        assert f"| {name} | {t2} us | {picked_cell} | {accepted} | {spread} |" in doc, line
        checked += 1
    assert checked == len(replay_table.BUNDLED)
    for path in MAPS:
        counts = load_engine_map(path).schedule.counts()  # type: ignore[union-attr]
        row = (f"| {path.name.split('.')[0]} | {counts['ops']} | {counts['hmx']} | {counts['vec']} | {counts['hvx_beside_hmx']} "
               f"| {counts['copies']} | {counts['syncs']} |")
        assert row in doc, row


def test_the_replays_entry_moves_what_the_expansions_entry_reads() -> None:
    """group_of's entry bytes are those of the expansion's entry op (op_package/htp_expand.py): it copies
    its first input (the carrier) and waits on the rest, every non-constant input of the node."""
    import re

    from hexfuse import fuse_model
    from hexfuse.graph_passes.cost.cli import scorer_for
    from hexfuse.graph_passes.cost.schedule_verdict import _stored_bytes, group_of
    from hexfuse.op_package.htp_expand import expand_fused_op

    path = ROOT / "models" / "llama_prefill_decode_qdq.onnx"
    ops = fuse_model(path, scorer_for("sm8650", 0.0, model=path, use_schedule=False, as_designed=True)).spec.fused_ops
    for fused_op in ops:
        rule = expand_fused_op(fused_op).rules[0].replacement
        call = rule[rule.index(f'Op("{fused_op.op_type}__enter", '):]
        read = [fused_op.inputs[int(i)] for i in re.findall(r'"in_(\d+)"', call[:call.index(")")])]
        group = group_of(fused_op)
        assert group.carrier_bytes == _stored_bytes(read[0]) > 0
        assert group.input_bytes == sum(map(_stored_bytes, read))
        outputs = {t.name: _stored_bytes(t) for t in fused_op.outputs}
        matrix = {n for task in fused_op.tasks if task.engine == "matrix" for n in task.outputs}
        assert group.matrix_output_bytes == sum(outputs[n] for n in matrix)
        assert sorted(group.task_output_bytes) == sorted(b for n, b in outputs.items() if n not in matrix)
    assert len(ops) > 10


@pytest.mark.parametrize("name", ["gptj_block_qdq", "llama_prefill_decode_qdq"])
def test_the_bound_that_skips_a_replay_is_the_fused_forms_own(name: str) -> None:
    """ScheduleJudge skips the replay where fused_costs says the task work cannot cover what the fused form
    adds (its credit is at most task_ns - added_ns). On every independent pair of the bundled LMs, those
    are exactly the fused form's figures, so a skipped pair is one the replay would have rejected."""
    from hexfuse import analyze_model
    from hexfuse.graph_passes.analysis.candidates import find_candidates
    from hexfuse.graph_passes.cost.cli import scorer_for
    from hexfuse.graph_passes.cost.schedule_verdict import ScheduleJudge, group_of
    from hexfuse.graph_passes.spec.builder import fused_op_spec

    path = ROOT / "models" / f"{name}.onnx"
    scorer = scorer_for("sm8650", 0.0, model=path, as_designed=True)
    analysis = analyze_model(path, scorer).analysis
    judge = ScheduleJudge(scorer.engines.schedule, scorer.target, 0.0)
    compared = skipped = 0
    for pair in find_candidates(analysis).pairs:
        group = group_of(fused_op_spec(analysis, (analysis.tasks[pair.first], analysis.tasks[pair.second])))
        if not group.matrix_nodes:
            continue
        bound = fused_costs(judge.schedule, judge.costs, judge.target, group)
        try:
            fused = fuse_group(judge.schedule, judge.costs, judge.target, group, (judge.base, judge.original))
        except Unholdable:
            continue
        if fused is None:
            continue
        assert bound == (fused.task_ns, fused.added_ns)
        compared += 1
        skipped += bound[0] <= bound[1]
    assert compared > 10 and skipped > 0  # (on these models every pair: its task work is below a microsecond)
