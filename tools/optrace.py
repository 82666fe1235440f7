"""What the HTP scheduler actually did with a graph: read the optrace schematic, draw engine lanes.

``profiling_level=optrace`` on the QNN EP writes ``<graph>_schematic.bin`` in the working folder: a
text dump (Python syntax) of the graph before and after HTP's optimizations, each op's kernel, flags
and placement, the run lists per resource and the checkpoint gates. This module parses it without
executing anything (an ``ast`` walk that accepts literals and the dump's own call forms only) and
turns the op table (``opdesc_map``) into a schedule:

    runlist position ->   0    10        20        30
    main   (scalar/HMX)   |ConvLayer_s1.opt (RESOURCE_HMX)|        HMX work is issued from the main list
    hvx                   |== HexFuse_k__t1 ==============|        launch (MOVE_EARLY) .. wait (MOVE_LATE)
    dma                   |== weights_to_vtcm ==|                   dma start .. dma sync

Positions are a display order, not time (the simulator's clock says nothing about a device) and not
the synchronisation either: what may run together is read from the happens-before graph of the run
lists and checkpoint gates (``runlist2`` main thread in program order, ``runlist_vec`` HVX threads,
done -> gate edges; tools/schedule_reader.py, graph_passes/engines/qnn_schedule.py): two ops may overlap
exactly when neither reaches the other. Ops keep the QNN node id of the node they came from in their
low 32 bits, so every final op is attributed to the QNN node (a fused node, say) it was expanded from;
``qnn_name_translations`` names those nodes.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

ENGINES = ("main", "hmx", "hvx", "dma")
_WANTED = ("opdesc_map", "qnn_name_translations", "checkpoints", "qnn_graph_name", "graph_before_optimization",
           "runlist2", "runlist_vec", "bandwidth_information")
_MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class Step:
    """One entry of the op table, in run-list order."""
    key: str  # the table's own key, '#49'
    op_id: int
    name: str  # kernel name, e.g. 'q::ConvLayer_s1.opt', 'HexFuse::HexFuse_2_7cb113__t1'
    position: int  # run-list position (issue order on the main thread)
    op_flags: tuple[str, ...]
    flags: tuple[str, ...]
    after: tuple[str, ...]  # keys this step waits for (csts_in)

    @property
    def origin(self) -> int:
        """QNN node id of the node this op was expanded from."""
        return self.op_id & 0xFFFFFFFF


@dataclass(frozen=True)
class Span:
    """An op's occupancy of one engine, in run-list positions [start, end]."""
    name: str
    engine: str
    start: int
    end: int
    origin: int
    serial_variant: bool = False  # a hexfuse task op run after the previous task (barrier switch)


@dataclass
class Schedule:
    graph: str
    steps: list[Step]
    spans: list[Span]
    nodes: dict[int, str]  # QNN node id -> node name
    gates: dict[str, tuple[int, int]] = field(default_factory=dict)  # op id (hex) -> (wait, signal)
    # the graph QNN handed to HTP, before its optimizations: node id -> QNN op ('q::QNN_Conv2d'), and
    # node id -> ids of the nodes producing its inputs (engine_map attribution walks it)
    operations: dict[int, str] = field(default_factory=dict)
    producers: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # the run lists in program order (op ids): runlist2 is the main thread, runlist_vec the HVX threads
    main_list: tuple[int, ...] = ()
    vec_list: tuple[int, ...] = ()
    bandwidth: dict[int, tuple[int, int]] = field(default_factory=dict)  # op id -> (VTCM bytes, DDR bytes)
    _graph: object = field(default=None, repr=False, compare=False)

    def happens_before(self):
        """The run lists as a happens-before graph (ops named by QNN node), built once; None without run lists."""
        if self._graph is None and self.main_list:
            from hexfuse.tools.schedule_reader import qnn_schedule

            self._graph = qnn_schedule(self)
        return self._graph

    def of_node(self, name: str) -> list[Span]:
        ids = {i for i, n in self.nodes.items() if n == name or n.startswith(name + "_")}
        return [s for s in self.spans if s.origin in ids]

    def fused_nodes(self) -> list[str]:
        """QNN names of hexfuse fused nodes whose ops appear in the final schedule."""
        present = {s.origin for s in self.spans}
        names = {n for i, n in self.nodes.items() if i in present and n.startswith("hexfuse/")}
        return sorted(names)


# --- safe parsing ----------------------------------------------------------------------------------
class _Literal(ast.NodeVisitor):
    """Evaluates the dump's expressions: literals, dicts/lists/tuples, negation, and calls, which
    become {'args': [...], **kwargs}. Names evaluate to None. Nothing is executed."""

    def value(self, node: ast.AST):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Dict):
            return {self.value(k): self.value(v) for k, v in zip(node.keys, node.values) if k is not None}
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(v) for v in node.elts]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.value(node.operand)
            return -inner if isinstance(inner, (int, float)) else None
        if isinstance(node, ast.Call):
            out = {"args": [self.value(a) for a in node.args]}
            out.update({k.arg: self.value(k.value) for k in node.keywords if k.arg})
            return out
        return None


def _sections(text: str) -> dict[str, object]:
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise HexfuseError(f"not an optrace schematic (no Python-syntax dump): line {exc.lineno}: {exc.msg}") from None
    literal = _Literal()
    found: dict[str, object] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
            name = statement.targets[0].id
            if name in _WANTED:
                found[name] = literal.value(statement.value)
        elif (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
              and isinstance(statement.value.func, ast.Attribute) and statement.value.func.attr == "append"
              and isinstance(statement.value.func.value, ast.Name) and statement.value.func.value.id == "checkpoints"):
            found.setdefault("checkpoints_appended", []).append(literal.value(statement.value.args[0]))  # type: ignore[union-attr]
    if "opdesc_map" not in found:
        raise HexfuseError("the schematic holds no op table (opdesc_map): was it written by profiling_level=optrace?")
    return found


def _tuple(value) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _engine(step: Step) -> str:
    flags = step.op_flags
    if "RESOURCE_HMX" in flags or "FOR_HMX" in flags:
        return "hmx"
    if "FOR_HVX" in flags:
        return "hvx"
    if "FOR_DMA" in flags:
        return "dma"
    return "main"


def _spans(steps: list[Step]) -> list[Span]:
    """Launch/wait pairs become one span from launch to wait; anything else occupies its own position."""
    by_key = {s.key: s for s in steps}
    joined: dict[str, int] = {}
    for step in steps:  # a join (MOVE_LATE) waits on its launch: the first key it depends on
        if "MOVE_LATE" in step.op_flags:
            for key in step.after:
                if key in by_key and "MOVE_EARLY" in by_key[key].op_flags:
                    joined.setdefault(key, step.position)
    spans = []
    for step in steps:
        if "MOVE_LATE" in step.op_flags or "is_dummy_op" in step.flags or step.name.startswith("@"):
            continue
        end = joined.get(step.key, step.position)
        name = step.name.split("::", 1)[-1]
        spans.append(Span(name, _engine(step), step.position, end, step.origin, name.endswith("_s") and "__t" in name))
    return spans


def read_schematic(path: str | Path) -> Schedule:
    path = Path(path)
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise HexfuseError(f"{path}: {path.stat().st_size >> 20} MiB is more than an optrace schematic holds")
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise HexfuseError(f"cannot read schematic {path}: {exc.strerror}") from None
    try:
        return _schedule(path, _sections(text))
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:  # a section of another shape
        raise HexfuseError(f"{path}: not an optrace schematic this reader knows ({type(exc).__name__}: {exc})") from None


def _schedule(path: Path, found: dict[str, object]) -> Schedule:
    steps = []
    for key, desc in (found["opdesc_map"] or {}).items():  # type: ignore[union-attr]
        if not isinstance(desc, dict) or len(desc.get("args", [])) < 2:
            continue
        op_id, name = desc["args"][0], desc["args"][1]
        if not isinstance(op_id, int) or not isinstance(name, str) or not isinstance(desc.get("runlist_pos"), int):
            continue
        steps.append(Step(str(key), op_id, name, desc["runlist_pos"], _tuple(desc.get("op_flags")),
                          _tuple(desc.get("flags")), _tuple(desc.get("csts_in"))))
    steps.sort(key=lambda s: s.position)
    nodes = {k: v for k, v in (found.get("qnn_name_translations") or {}).items() if isinstance(k, int) and isinstance(v, str)}  # type: ignore[union-attr]
    gates: dict[str, tuple[int, int]] = {}
    for table in found.get("checkpoints_appended", []):  # type: ignore[union-attr]
        for op_id, pair in (table or {}).items():
            if isinstance(op_id, int) and isinstance(pair, list) and len(pair) == 2:
                gates[hex(op_id)] = (int(pair[0]), int(pair[1]))
    operations, producers = _before_optimization(found.get("graph_before_optimization"))
    graph = found.get("qnn_graph_name")  # a literal string, or the file's name (never an evaluated call's dict)
    return Schedule(graph if isinstance(graph, str) and graph else path.stem, steps, _spans(steps), nodes, gates,
                    operations, producers, _ids(found.get("runlist2")), _ids(found.get("runlist_vec")),
                    _bandwidth(found.get("bandwidth_information")))


def _ids(value: object) -> tuple[int, ...]:
    return tuple(v for v in value if isinstance(v, int)) if isinstance(value, list) else ()


def _bandwidth(rows: object) -> dict[int, tuple[int, int]]:
    """``[{"opid": id, "dram_read": n, "dram_write": n, "vtcm_read": n, "vtcm_write": n}, ...]``."""
    out: dict[int, tuple[int, int]] = {}
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, dict) and isinstance(row.get("opid"), int):
            number = lambda key: row.get(key) if isinstance(row.get(key), int) else 0  # noqa: E731
            out[row["opid"]] = (number("vtcm_read") + number("vtcm_write"), number("dram_read") + number("dram_write"))
    return out


def _before_optimization(graph: object) -> tuple[dict[int, str], dict[int, tuple[int, ...]]]:
    """``{id: {'operation': 'q::QNN_Conv2d', 'inputs': [(producer id, output index), ...]}, ...}``."""
    operations: dict[int, str] = {}
    producers: dict[int, tuple[int, ...]] = {}
    for key, node in (graph.items() if isinstance(graph, dict) else ()):
        if not isinstance(key, int) or not isinstance(node, dict) or not isinstance(node.get("operation"), str):
            continue
        operations[key] = node["operation"]
        edges = node.get("inputs") if isinstance(node.get("inputs"), list) else []
        producers[key] = tuple(e[0] for e in edges if isinstance(e, list) and e and isinstance(e[0], int))
    return operations, producers


def find_schematics(folder: str | Path) -> list[Path]:
    return sorted(Path(folder).glob("*_schematic.bin"))


# --- what it shows ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class FusedNodeSchedule:
    node: str
    matrix: tuple[Span, ...]  # QNN's own ops on HMX expanded from the node
    tasks: tuple[Span, ...]  # hexfuse task ops (HVX)
    other: tuple[Span, ...]  # everything else expanded from the node (conversions, weight moves)
    # from the happens-before graph (run lists + checkpoint gates; graph_passes/engines/qnn_schedule.py):
    in_window: int = 0  # task ops that may run beside one of the node's own HMX ops
    tasks_together: bool = False  # two of its task ops may run at the same time (on two HVX threads)

    @property
    def overlapped(self) -> bool:
        """A task op may run beside a matrix op of the node, or beside another of its task ops: neither
        reaches the other in QNN's happens-before graph."""
        return self.in_window > 0 or self.tasks_together

    @property
    def serial(self) -> bool:
        return any(t.serial_variant for t in self.tasks)


def fused_node_schedules(schedule: Schedule) -> list[FusedNodeSchedule]:
    graph = schedule.happens_before()
    out = []
    for node in schedule.fused_nodes():
        spans = schedule.of_node(node)
        tasks = tuple(s for s in spans if "__t" in s.name and s.engine == "hvx")
        matrix = tuple(s for s in spans if s.engine == "hmx" or (s.engine == "hvx" and _is_matrix_kernel(s.name)))
        other = tuple(s for s in spans if s not in tasks and s not in matrix)
        in_window, together = 0, False
        if graph is not None:
            mine = set(graph.of_nodes([node]))
            task_ops = [i for i in mine if "__t" in graph.ops[i].kernel and graph.ops[i].lane == "vec"]
            hmx_ops = [i for i in mine if graph.ops[i].resource == "hmx" or _is_matrix_kernel(graph.ops[i].kernel)]
            in_window = sum(1 for t in task_ops if any(not graph.ordered(t, m) for m in hmx_ops))
            together = any(not graph.ordered(a, b) for a in task_ops for b in task_ops if a < b)
        out.append(FusedNodeSchedule(node, matrix, tasks, other, in_window, together))
    return out


_MATRIX_KERNELS = ("ConvLayer", "MatMul", "FullyConnected")


def is_ordering_op(kernel: str) -> bool:
    """An entry or join op of a hexfuse expansion (op_package/htp_expand.py)."""
    return kernel.endswith(("__enter", "__join"))


def _is_matrix_kernel(name: str) -> bool:
    """A matrix kernel QNN runs on HVX (fp32 MatMul_bias, say), not one of its weight/bias helpers."""
    return name.startswith(_MATRIX_KERNELS) and ".opt." not in name


def summary_lines(schedule: Schedule) -> list[str]:
    lines = [f"schedule of {schedule.graph}: {len(schedule.steps)} op-table entries, "
             + ", ".join(f"{e} {sum(1 for s in schedule.spans if s.engine == e)}" for e in ENGINES)]
    if schedule.main_list:
        counts = schedule.happens_before().counts()
        lines.append(f"happens-before graph: {counts['main']} main-list ops ({counts['hmx']} on HMX), {counts['vec']} on the "
                     f"HVX list; {counts['hvx_beside_hmx']} HVX ops may run beside an HMX op ({counts['hvx_hmx_pairs']} "
                     f"unordered HVX-HMX pairs); {counts['copies']} layout copies, {counts['syncs']} syncs")
    for fused in fused_node_schedules(schedule):
        verdict = ("serial: task ops wait for the previous task" if fused.serial
                   else f"overlapped ({fused.in_window} of {len(fused.tasks)} task ops beside the node's own HMX ops)"
                   if fused.overlapped else "not overlapped: every task op is ordered against the node's matrix ops")
        lines.append(f"  {fused.node}: {verdict}")
        for label, spans in (("matrix", fused.matrix), ("tasks", fused.tasks)):
            for s in spans:
                lines.append(f"    {label:6s} {s.engine:4s} [{s.start:4d}..{s.end:4d}] {s.name}")
    return lines


def trace_events(schedule: Schedule) -> list[dict]:
    """Perfetto/Chrome trace events, one lane per engine, 1 us per run-list position."""
    pid = 1
    events: list[dict] = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": schedule.graph}}]
    for tid, engine in enumerate(ENGINES):
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": engine}})
    for span in schedule.spans:
        events.append({"ph": "X", "pid": pid, "tid": ENGINES.index(span.engine), "name": span.name, "ts": span.start,
                       "dur": max(1, span.end - span.start), "args": {"qnn_node": schedule.nodes.get(span.origin, "")}})
    return events


def png_bytes(schedule: Schedule, nodes: Iterable[str] = ()) -> bytes:
    """Engine lanes over run-list positions; the spans of the given QNN nodes are highlighted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"main": "#8c8c8c", "hmx": "#d62728", "hvx": "#1f77b4", "dma": "#2ca02c"}
    highlight = {i for i, n in schedule.nodes.items() if any(n == x or n.startswith(x + "_") for x in nodes)}
    fig, ax = plt.subplots(figsize=(12, 3))
    for span in schedule.spans:
        row = ENGINES.index(span.engine)
        ax.broken_barh([(span.start, max(0.8, span.end - span.start))], (row - 0.4, 0.8),
                       facecolors=colours[span.engine], alpha=1.0 if span.origin in highlight else 0.35,
                       edgecolor="black" if span.origin in highlight else "none")
    ax.set_yticks(range(len(ENGINES)), ENGINES)
    ax.set_xlabel("run-list position (issue order; not time)")
    ax.set_title(f"HTP schedule of {schedule.graph}" + (" (highlighted: " + ", ".join(nodes) + ")" if nodes else ""))
    fig.tight_layout()
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def trace_bytes(schedule: Schedule) -> bytes:
    """The schedule as a Chrome/Perfetto trace."""
    return json.dumps({"traceEvents": trace_events(schedule)}, separators=(",", ":")).encode()
