"""tools/optrace.py on a small hand-written schematic: safe parsing, spans, overlap, attribution.

The text imitates the dump the QNN EP writes with profiling_level=optrace (a Python-syntax file; see
the module docstring): the graph before optimization, the name translations, the run lists, the
checkpoint gates and the op table. Two fused nodes: one whose task op waits on nothing its matrix op
does (overlapped: neither reaches the other), one whose serial variant is gated on its matrix op's done
(serial: ordered after it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.optrace import fused_node_schedules, read_schematic, summary_lines, trace_events

SCHEMATIC = """\
# python_pprint_graph_summary, truegraph = 1, inorder=0
graph_before_optimization = { # :::BEGIN:graph_before_optimization:::
\t0x0000000000000002: {'operation':'q::Input', 'inputs' : [], 'outputs' : []},
\t0x0000000000000010: {'operation':'hexfuse::HexFuse_0_abc', 'inputs' : [(0x2,0),], 'outputs' : []},
\t0x0000000000000030: {'operation':'hexfuse::HexFuse_1_def', 'inputs' : [(0x10,0),(0x10,1),], 'outputs' : []},
\t0x0000000000000040: {'operation':'q::QNN_Conv2d', 'inputs' : [(0x30,0),], 'outputs' : []},
}
qnn_name_translations = {
0x0000000000000010: 'hexfuse/HexFuse_0_abc',
0x0000000000000030: 'hexfuse/HexFuse_1_def',
0x0000000000000040: 'conv0_token_3',
}
qnn_graph_name = "toy_graph"
runlist2 = [
	0x400200000010,
	0x400300000010,
	0x400500000030,
	0x400800000000,
	0x400900000040,
	0x400a00000040,
]
runlist_vec = [
	0x400100000010,
	0x400600000030,
]
checkpoints = []
checkpoints.append({
  0x400200000010 : [ -1 , -1 ],
  0x400300000010 : [ 0 , -1 ],
  0x400500000030 : [ -1 , 2 ],
  0x400800000000 : [ 1 , -1 ],
  0x400900000040 : [ 3 , -1 ],
  0x400a00000040 : [ -1 , -1 ],
  0x400100000010 : [ -1 , 1 ],
  0x400600000030 : [ 2 , 3 ],
})
try: opdesc
except Exception: from opinfo_util import opdesc,memgroup,interval_set
opdesc_map ={
  '#1': opdesc( 0x400100000010, "HexFuse::HexFuse_0_abc__t1", ptr=0x1, runlist_pos = 0,
      flags=('is_fork',), op_flags=('FOR_HVX','MOVE_EARLY',), n_out=1),
  '#2': opdesc( 0x400200000010, "q::ConvLayer_s1.opt", ptr=0x2, runlist_pos = 1, op_flags=('RESOURCE_HMX',)),
  '#3': opdesc( 0x400300000010, "q::ConvLayer.opt.weights_to_vtcm", runlist_pos = 2, op_flags=('FOR_DMA','MOVE_EARLY','IS_COPY',)),
  '#4': opdesc( 0x400400000010, "HexFuse::HexFuse_0_abc__t1", runlist_pos = 3, category='join',
      op_flags=('FOR_HVX','MOVE_LATE',), csts_in = ('#1',)),
  '#5': opdesc( 0x400500000030, "q::ConvLayer_s1.opt", runlist_pos = 4, op_flags=('RESOURCE_HMX',)),
  '#6': opdesc( 0x400600000030, "HexFuse::HexFuse_1_def__t1_s", runlist_pos = 5, op_flags=('FOR_HVX','MOVE_EARLY',),
      csts_in = ('#5',)),
  '#7': opdesc( 0x400700000030, "HexFuse::HexFuse_1_def__t1_s", runlist_pos = 6, op_flags=('FOR_HVX','MOVE_LATE',),
      csts_in = ('#6',)),
  '#8': opdesc( 0x400800000000, "@Sync", runlist_pos = 7, op_flags=()),
  '#9': opdesc( 0x400900000040, "q::ConvLayer_s1.opt", runlist_pos = 8, op_flags=('RESOURCE_HMX',)),
  '#10': opdesc( 0x400a00000040, "q::Dummy", runlist_pos = 9, flags=('is_dummy_op',), op_flags=()),
  '#11': opdesc( "not an id", "q::Broken", runlist_pos = 10),
  '#12': opdesc( 0x400c00000040, "q::NoPosition"),
}
"""


def _write(tmp_path: Path, text: str, name: str = "toy_schematic.bin") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_steps_names_gates_and_the_graph_before_optimization(tmp_path: Path) -> None:
    schedule = read_schematic(_write(tmp_path, SCHEMATIC))
    assert schedule.graph == "toy_graph"
    assert [s.position for s in schedule.steps] == list(range(10))  # '#11' and '#12' are malformed: skipped
    assert schedule.steps[1].origin == 0x10 and schedule.steps[1].op_id == 0x400200000010
    assert schedule.nodes[0x40] == "conv0_token_3"
    assert schedule.gates[hex(0x400100000010)] == (-1, 1) and schedule.gates[hex(0x400600000030)] == (2, 3)
    assert schedule.main_list[0] == 0x400200000010 and schedule.vec_list == (0x400100000010, 0x400600000030)
    assert schedule.operations[0x40] == "q::QNN_Conv2d"
    assert schedule.producers[0x30] == (0x10, 0x10)


def test_spans_join_launch_and_wait_and_drop_dummies(tmp_path: Path) -> None:
    spans = read_schematic(_write(tmp_path, SCHEMATIC)).spans
    by_position = {s.start: s for s in spans}
    assert by_position[0].end == 3 and by_position[0].engine == "hvx"  # launch at 0, its join (MOVE_LATE) at 3
    assert by_position[1].engine == "hmx" and by_position[1].end == 1
    assert by_position[2].engine == "dma"
    assert 3 not in by_position and 6 not in by_position  # joins fold into their launch's span
    assert 7 not in by_position and 9 not in by_position  # @Sync and dummy ops occupy nothing
    assert by_position[5].serial_variant and not by_position[0].serial_variant


def test_overlapped_and_serial_fused_nodes(tmp_path: Path) -> None:
    schedule = read_schematic(_write(tmp_path, SCHEMATIC))
    fused = {f.node: f for f in fused_node_schedules(schedule)}
    assert sorted(fused) == ["hexfuse/HexFuse_0_abc", "hexfuse/HexFuse_1_def"]  # conv0 is no fused node
    first, second = fused["hexfuse/HexFuse_0_abc"], fused["hexfuse/HexFuse_1_def"]
    assert [s.name for s in first.matrix] == ["ConvLayer_s1.opt"]
    assert [s.name for s in first.tasks] == ["HexFuse_0_abc__t1"]
    assert [s.name for s in first.other] == ["ConvLayer.opt.weights_to_vtcm"]  # a helper, not matrix work
    assert first.overlapped and first.in_window == 1 and not first.serial
    assert not second.overlapped and second.serial  # the _s variant is gated on the matrix op's done
    lines = summary_lines(schedule)
    assert any("HexFuse_0_abc: overlapped" in line for line in lines)
    assert any("HexFuse_1_def: serial" in line for line in lines)


def test_of_node_attributes_ops_by_qnn_node_id(tmp_path: Path) -> None:
    schedule = read_schematic(_write(tmp_path, SCHEMATIC))
    assert [s.start for s in schedule.of_node("conv0")] == [8]  # 'conv0_token_3' is conv0 renamed by QNN
    assert schedule.of_node("conv") == []  # a prefix of a name is not the name
    events = [e for e in trace_events(schedule) if e["ph"] == "X"]
    assert {e["args"]["qnn_node"] for e in events} == {"hexfuse/HexFuse_0_abc", "hexfuse/HexFuse_1_def", "conv0_token_3"}


@pytest.mark.parametrize("payload", [
    "__import__('os').system('touch {marker}')",
    "(lambda: __import__('os').system('touch {marker}'))()",
    "open('{marker}', 'w').write('x')",
])
def test_code_in_the_dump_is_never_executed(tmp_path: Path, payload: str) -> None:
    marker = tmp_path / "executed"
    code = payload.format(marker=marker)
    text = SCHEMATIC.replace('"q::Dummy"', code) + f"\n{code}\nqnn_graph_name = {code}\n"
    schedule = read_schematic(_write(tmp_path, text))
    assert not marker.exists()
    assert len(schedule.steps) == 9  # the entry whose kernel name became code is dropped, nothing else
    assert schedule.graph == "toy_schematic"  # a non-literal graph name falls back to the file name


def test_rejects_what_is_no_schematic(tmp_path: Path) -> None:
    with pytest.raises(HexfuseError, match="not an optrace schematic"):
        read_schematic(_write(tmp_path, "\x00\x01 binary garbage ((("))
    with pytest.raises(HexfuseError, match="no op table"):
        read_schematic(_write(tmp_path, "qnn_graph_name = 'g'\n"))
    with pytest.raises(HexfuseError, match="cannot read schematic"):
        read_schematic(tmp_path / "missing_schematic.bin")


def test_two_task_ops_in_flight_together_overlap(tmp_path: Path) -> None:
    """A vector-only fused node: its two task ops on two HVX threads overlap when neither waits for the
    other, and do not when the second is gated on the first's done."""
    def schematic(second_gate: int) -> str:
        head = SCHEMATIC.split("runlist2 = [")[0]
        return head + f"""runlist2 = [
\t0x400500000000,
]
runlist_vec = [
\t0x400100000010,
\t0x400300000010,
]
checkpoints = []
checkpoints.append({{
  0x400100000010 : [ -1 , 1 ],
  0x400300000010 : [ {second_gate} , 2 ],
  0x400500000000 : [ 2 , -1 ],
}})
opdesc_map ={{
  '#1': opdesc( 0x400100000010, "HexFuse::HexFuse_0_abc__t0", runlist_pos = 0, op_flags=('FOR_HVX','MOVE_EARLY',)),
  '#2': opdesc( 0x400200000010, "HexFuse::HexFuse_0_abc__t0", runlist_pos = 2, op_flags=('FOR_HVX','MOVE_LATE',),
      csts_in = ('#1',)),
  '#3': opdesc( 0x400300000010, "HexFuse::HexFuse_0_abc__t1", runlist_pos = 1, op_flags=('FOR_HVX','MOVE_EARLY',)),
  '#4': opdesc( 0x400400000010, "HexFuse::HexFuse_0_abc__t1", runlist_pos = 5, op_flags=('FOR_HVX','MOVE_LATE',),
      csts_in = ('#3',)),
  '#5': opdesc( 0x400500000000, "@Sync", runlist_pos = 6, op_flags=()),
}}
"""
    for gate, expected in ((-1, True), (1, False)):
        (fused,) = fused_node_schedules(read_schematic(_write(tmp_path, schematic(gate), f"s{gate}_schematic.bin")))
        assert not fused.matrix and len(fused.tasks) == 2
        assert fused.overlapped is expected, gate


def test_cli_compares_two_schedules_and_replays_them(tmp_path: Path, capsys) -> None:
    from hexfuse.cli import main

    fused = _write(tmp_path, SCHEMATIC, "fused_schematic.bin")
    assert main(["optrace", str(fused), "--against", str(fused), "--target", "sm8650"]) == 0
    out = capsys.readouterr().out
    assert "happens-before graph: 6 main-list ops (3 on HMX), 2 on the HVX list" in out
    rows = {line.split("|")[1].strip(): line.split("|")[2:4] for line in out.splitlines() if line.startswith("| ")}
    assert rows["hvx_beside_hmx"][0].strip() == rows["hvx_beside_hmx"][1].strip() == "1"  # the first task op only
    assert float(rows["replay_us"][0]) > 0
    assert main(["optrace", str(tmp_path / "nothing_here")]) != 0


def test_cli_never_writes_over_a_schematic_it_reads(tmp_path: Path, capsys) -> None:
    from hexfuse.cli import main

    fused, original = _write(tmp_path, SCHEMATIC, "fused_schematic.bin"), _write(tmp_path, SCHEMATIC, "o_schematic.bin")
    for flag, out in (("--png", fused), ("--trace", fused), ("--trace", original)):
        assert main(["optrace", str(fused), "--against", str(original), flag, str(out)]) == 1
        assert "refusing to overwrite" in capsys.readouterr().err
    assert main(["optrace", str(fused), "--png", str(tmp_path / "t"), "--trace", str(tmp_path / "t")]) == 1
    assert "name one file" in capsys.readouterr().err
    assert fused.read_text(encoding="utf-8") == original.read_text(encoding="utf-8") == SCHEMATIC
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fused_schematic.bin", "o_schematic.bin"]
