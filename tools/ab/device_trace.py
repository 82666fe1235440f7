"""Engine overlap on the device, read from per-thread timestamps (issue 44).

The question a device A/B must answer: while a fused node's task op runs on an HVX thread, is HMX busy
with that node's own matrix work? Our reading of QNN's schedule (tools/optrace.py, the happens-before
graph) says the task op is unordered with its own HMX ops; public device measurements say a custom op's
compute never intersects HMX work. Only timestamps decide, so everything here is interval algebra on
per-op [start, end) intervals of one profiled run, never ratios of separate runs:

    HMX    |   [mm 0 ]      [mm 1   ]           |    task op  T = union of its slices (any HVX thread)
    HVX 0  | [t1 slice a  ]                     |    own HMX  M = union of the node's ops on HMX
    HVX 1  |        [t1 slice b]                |    overlap    = |T n M|, and |T n M| / |T|
           +------------------------------------+

Sources (formats learned from public material; no code copied):
- **chrometrace JSON** written by QNN's profile viewer from an optrace run (``qnn-profile-viewer --reader
  libQnnHtpOptraceProfilingReader.so --input_log <run>_qnn.log --schematic <graph>_schematic.bin``):
  ``traceEvents`` with ``ph: "M"`` ``thread_name`` records naming each hardware thread (HMX, HVX
  workers; the public v75 analyses see HMX as tid 256 and HVX as tids 512-515) and ``ph: "X"`` op events
  (``ts``, ``dur``, ``args`` with the HTP op type and the QNN op name). An op may appear on a process
  track and on its thread track: events are taken from thread tracks and de-duplicated.
- **ONNX Runtime's own profile** (``enable_profiling``): host threads, one event per ORT node; the QNN
  partition is one node. It gives the run's wall time around the accelerator, not engine overlap.
- **QNN EP CSV** (``profiling_file_path``): per-node cycles, durations only: no overlap can be read.

Time unit: the Chrome trace format counts ``ts``/``dur`` in microseconds; one public analysis reads the
viewer's values as cycles. Percentages hold either way; ``unit_check`` compares the trace's span with
the run's ``Accelerator (execute) time`` (us) from the same profile so a cycle-valued trace shows itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

Interval = tuple[float, float]
_MAX_BYTES = 512 << 20
# Hardware threads when a trace names none (public v75 analyses: HMX tid 256, HVX tids 512-515).
_HMX_TIDS = frozenset({256})
_HVX_TIDS = frozenset(range(512, 520))


@dataclass(frozen=True)
class Op:
    """One op execution (or one slice of it) on one hardware thread."""
    kernel: str  # HTP op type, e.g. 'q::ConvLayer_s1.opt', 'HexFuse::HexFuse_2_7cb113__t1'
    node: str  # QNN op name it was expanded from ('' when the trace does not say)
    lane: str  # the thread as the trace names it, e.g. 'HMX', 'HVX 1'
    engine: str  # 'hmx', 'hvx' or 'other'
    start: float
    end: float


@dataclass(frozen=True)
class DeviceTrace:
    path: str
    source: str  # 'chrometrace', 'ort_profile', 'qnn_csv'
    ops: tuple[Op, ...]
    per_thread: bool  # intervals are per-hardware-thread timestamps (False: no overlap can be read)
    simulator: bool = False  # written by the x86 HTP simulator: its times are not the device's
    unit: str = "us"
    notes: tuple[str, ...] = ()
    arg_keys: tuple[str, ...] = ()  # the op events' args keys (what attribution to nodes could use)

    def lanes(self) -> list[str]:
        order = {"hmx": 0, "hvx": 1, "other": 2}
        return sorted({o.lane for o in self.ops}, key=lambda lane: (min(order[o.engine] for o in self.ops
                                                                          if o.lane == lane), lane))


# --- interval algebra ------------------------------------------------------------------------------
def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint, merged; empty intervals dropped (touching intervals merge)."""
    merged: list[list[float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def measure(intervals: Iterable[Interval]) -> float:
    return sum(b - a for a, b in union(intervals))


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The intersection of two interval sets (each merged first), as merged intervals."""
    x, y = union(a), union(b)
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if hi > lo:
            out.append((lo, hi))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


# --- readers ---------------------------------------------------------------------------------------
def _engine(lane: str, tid: object) -> str:
    upper = lane.upper()
    if "HMX" in upper:
        return "hmx"
    if "HVX" in upper:
        return "hvx"
    if not lane and isinstance(tid, int):
        return "hmx" if tid in _HMX_TIDS else "hvx" if tid in _HVX_TIDS else "other"
    return "other"


def _load_json(path: Path) -> object:
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise HexfuseError(f"{path}: {path.stat().st_size >> 20} MiB is more than a profile of one run holds")
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise HexfuseError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise HexfuseError(f"{path} is not JSON: {exc}".replace("\n", " ")) from None


def _events(data: object, path: Path) -> list[dict]:
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise HexfuseError(f"{path}: no traceEvents list (not a Chrome trace)")
    return [e for e in events if isinstance(e, dict)]


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def read_chrometrace(path: str | Path, simulator: bool = False) -> DeviceTrace:
    """QNN's optrace chrometrace: op events per hardware thread."""
    path = Path(path)
    events = _events(_load_json(path), path)
    names: dict[tuple[object, object], str] = {}
    by_tid: dict[object, set[str]] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name" and isinstance(e.get("args"), dict):
            names[(e.get("pid"), e.get("tid"))] = str(e["args"].get("name", ""))
            by_tid.setdefault(e.get("tid"), set()).add(names[(e.get("pid"), e.get("tid"))])
    for tid, found in by_tid.items():  # a thread named under one pid, its ops under another: by tid alone
        if len(found) == 1:
            names.setdefault((None, tid), next(iter(found)))
    named: list[Op] = []
    unnamed: list[Op] = []  # on a thread the trace does not name: known by its tid, or a process track
    arg_keys: set[str] = set()
    for e in events:
        if e.get("ph") != "X":
            continue
        ts, dur = _number(e.get("ts")), _number(e.get("dur"))
        if ts is None or dur is None or dur < 0:
            continue
        lane = names.get((e.get("pid"), e.get("tid"))) or names.get((None, e.get("tid")), "")
        engine = _engine(lane, e.get("tid"))
        if engine == "other" and not lane:
            continue  # no thread at all
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        arg_keys.update(str(k) for k in args)
        kernel = str(args.get("HTP Op Type") or e.get("name") or "")
        node = str(args.get("QNN Op Name") or args.get("qnn_node") or "")
        (named if lane else unnamed).append(Op(kernel, node, lane or f"tid {e.get('tid')}", engine, ts, ts + dur))
    # The viewer repeats each op on a process track: an op seen on a named thread is not counted again,
    # and an exact repeat on one thread is one op (two slices starting together on two threads stay two).
    on_threads = {(o.kernel, o.node, o.start, o.end) for o in named}
    seen: set[tuple] = set()
    ops: list[Op] = []
    for op in named + [o for o in unnamed if (o.kernel, o.node, o.start, o.end) not in on_threads]:
        key = (op.lane, op.kernel, op.node, op.start, op.end)
        if key not in seen:
            seen.add(key)
            ops.append(op)
    if not ops:
        raise HexfuseError(f"{path}: no op events on a hardware thread (ph 'X' on a thread named HMX/HVX, "
                           "or tids 256 / 512-515): not QNN's optrace chrometrace")
    ops.sort(key=lambda o: (o.start, o.lane))
    notes = ("x86 HTP simulator: host-driven times, not the device's",) if simulator else ()
    return DeviceTrace(str(path), "chrometrace", tuple(ops), True, simulator, "us", notes, tuple(sorted(arg_keys)))


def read_ort_profile(path: str | Path, simulator: bool = False) -> DeviceTrace:
    """ONNX Runtime's profile of the last run: host threads, one interval per ORT node (the QNN EP's
    partition is one node), times in us."""
    path = Path(path)
    events = _events(_load_json(path), path)
    starts = sorted(_number(e.get("ts")) or 0.0 for e in events
                    if e.get("cat") == "Session" and e.get("name") == "model_run")
    nodes = [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]
    if not nodes:
        raise HexfuseError(f"{path}: no node events (not ONNX Runtime's profile of a run)")
    last = starts[-1] if starts else min(_number(e.get("ts")) or 0.0 for e in nodes)
    ops = []
    for e in nodes:
        ts, dur = _number(e.get("ts")), _number(e.get("dur"))
        if ts is None or dur is None or ts < last:
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        ops.append(Op(str(args.get("op_name", "")), str(e["name"])[: -len("_kernel_time")],
                      f"ORT thread {e.get('tid')} ({args.get('provider', '')})", "other", ts, ts + dur))
    ops.sort(key=lambda o: o.start)
    notes = ["host threads of ONNX Runtime: the QNN partition is one node; no HMX/HVX lanes"]
    if simulator:
        notes.append("x86 HTP simulator: host-driven times, not the device's")
    return DeviceTrace(str(path), "ort_profile", tuple(ops), False, simulator, "us", tuple(notes))


def accelerator_us(csv_path: str | Path) -> list[float]:
    """``Accelerator (execute) time`` (us) per run of a QNN EP profile CSV (empty when absent)."""
    import csv

    out = []
    try:
        with open(csv_path, newline="") as f:
            for row in csv.DictReader(f):
                if (row.get("Event Identifier") or "").strip() == "Accelerator (execute) time" \
                        and (row.get("Unit of Measurement") or "").strip().upper() == "US":
                    value = _number(row.get("Time"))
                    if value is not None:
                        out.append(value)
    except OSError:
        return []
    return out


# --- what a run shows ------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeOverlap:
    """One fused node in one run: its task ops against its own HMX ops."""
    node: str
    task_busy: float  # |T|: time some slice of one of the node's task ops ran
    hmx_busy: float  # |M|: time HMX ran one of the node's own ops
    overlap: float  # |T n M|
    window: Interval  # first start .. last end of the node's ops
    task_ops: int
    hmx_ops: int

    @property
    def percent_of_task(self) -> float | None:
        return 100.0 * self.overlap / self.task_busy if self.task_busy > 0 else None


@dataclass(frozen=True)
class GraphOverlap:
    """The whole run: every HVX thread against HMX."""
    hvx_busy: float
    hmx_busy: float
    overlap: float
    span: Interval
    hvx_threads: int

    @property
    def percent_of_hmx(self) -> float | None:
        return 100.0 * self.overlap / self.hmx_busy if self.hmx_busy > 0 else None


@dataclass
class RunOverlap:
    key: str
    trace: DeviceTrace
    graph: GraphOverlap | None
    nodes: list[NodeOverlap] = field(default_factory=list)
    unit_check: str = ""


def _belongs(op: Op, node: str, op_type: str, unique_type: bool) -> bool:
    if op.node and (op.node == node or op.node.startswith((node + "_", node + ":", node + "/"))):
        return True
    # without a QNN op name: a task op's kernel names its op type (HexFuse_2_7cb113__t1), unique per node
    return not op.node and unique_type and bool(op_type) and f"{op_type}__t" in op.kernel


def is_task_kernel(kernel: str) -> bool:
    """A hexfuse task op (op_package/htp_expand.py names them <OpType>__t<k>, variants _s / _e)."""
    return "__t" in kernel.split("::")[-1]


def graph_overlap(trace: DeviceTrace) -> GraphOverlap | None:
    if not trace.per_thread or not trace.ops:
        return None
    hvx = [(o.start, o.end) for o in trace.ops if o.engine == "hvx"]
    hmx = [(o.start, o.end) for o in trace.ops if o.engine == "hmx"]
    span = (min(o.start for o in trace.ops), max(o.end for o in trace.ops))
    threads = len({o.lane for o in trace.ops if o.engine == "hvx"})
    return GraphOverlap(measure(hvx), measure(hmx), measure(intersect(hvx, hmx)), span, threads)


def node_overlaps(trace: DeviceTrace, fused: Sequence[tuple[str, str]]) -> list[NodeOverlap]:
    """Per fused node, given as (ONNX node name, op type) pairs."""
    if not trace.per_thread:
        return []
    type_count: dict[str, int] = {}
    for _, op_type in fused:
        type_count[op_type] = type_count.get(op_type, 0) + 1
    out = []
    for node, op_type in fused:
        mine = [o for o in trace.ops if _belongs(o, node, op_type, type_count[op_type] == 1)]
        tasks = [o for o in mine if is_task_kernel(o.kernel)]
        hmx = [o for o in mine if o.engine == "hmx"]
        if not mine:
            continue
        t = [(o.start, o.end) for o in tasks]
        m = [(o.start, o.end) for o in hmx]
        window = (min(o.start for o in mine), max(o.end for o in mine))
        out.append(NodeOverlap(node, measure(t), measure(m), measure(intersect(t, m)), window,
                               len({(o.kernel, o.node) for o in tasks}), len({(o.kernel, o.node) for o in hmx})))
    return out


def unit_check(trace: DeviceTrace, accel_us: Sequence[float]) -> str:
    """Whether the trace's span fits the run's accelerator time in us (else its unit is another)."""
    if not accel_us or not trace.ops:
        return ""
    span = max(o.end for o in trace.ops) - min(o.start for o in trace.ops)
    ref = sorted(accel_us)[len(accel_us) // 2]
    if ref <= 0:
        return ""
    ratio = span / ref
    if 0.5 <= ratio <= 2.0:
        return f"trace span {span:.0f} against accelerator time {ref:.0f} us: microseconds"
    return (f"trace span {span:.0f} is {ratio:.0f}x the accelerator time {ref:.0f} us: the trace's unit is not "
            "microseconds (cycles?); the % columns hold, the us columns are in the trace's own unit")


def run_overlap(key: str, trace: DeviceTrace, fused: Sequence[tuple[str, str]],
                accel: Sequence[float] = ()) -> RunOverlap:
    return RunOverlap(key, trace, graph_overlap(trace), node_overlaps(trace, fused), unit_check(trace, accel))


# --- report ----------------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def table_lines(runs: Sequence[RunOverlap], predicted: dict[str, dict[str, str]] | None = None) -> list[str]:
    """The per-fused-node table, then the whole-graph line per run (side by side: original and fused).
    ``predicted[run][node]``: what the prepare's schedule says of the same node (tools/optrace.py)."""
    predicted = predicted or {}
    lines = []
    simulated = any(r.trace.simulator for r in runs)
    if simulated:
        lines.append("x86 HTP simulator: these times are host-driven, NOT the device's; read structure only")
    for r in runs:
        if not r.trace.per_thread:
            lines.append(f"{r.key}: {r.trace.source} has no per-thread timestamps: overlap cannot be read from it "
                         f"({Path(r.trace.path).name})")
    rows = [(r.key, n) for r in runs for n in r.nodes]
    if rows:
        lines.append("per fused node: task op (HVX) ∩ its own HMX ops")
        lines.append(f"  {'run':22s} {'fused node':40s} {'task us':>10s} {'own HMX us':>10s} {'overlap us':>10s} "
                     f"{'% of task':>9s}  schedule says")
        for key, n in rows:
            lines.append(f"  {key:22s} {n.node[:40]:40s} {n.task_busy:10.1f} {n.hmx_busy:10.1f} {n.overlap:10.1f} "
                         f"{_pct(n.percent_of_task):>9s}  {predicted.get(key, {}).get(n.node, '-')}")
    graph = [(r.key, r.graph) for r in runs if r.graph is not None]
    if graph:
        lines.append("whole graph: HVX threads ∩ HMX")
        lines.append(f"  {'run':22s} {'HVX us':>10s} {'HMX us':>10s} {'overlap us':>10s} {'% of HMX':>9s} "
                     f"{'HVX thr':>7s} {'span us':>10s}")
        for key, g in graph:
            lines.append(f"  {key:22s} {g.hvx_busy:10.1f} {g.hmx_busy:10.1f} {g.overlap:10.1f} "
                         f"{_pct(g.percent_of_hmx):>9s} {g.hvx_threads:7d} {g.span[1] - g.span[0]:10.1f}")
    for r in runs:
        if r.unit_check:
            lines.append(f"  {r.key}: {r.unit_check}")
    return lines


def to_json(runs: Sequence[RunOverlap]) -> dict:
    out = {}
    for r in runs:
        out[r.key] = {
            "trace": Path(r.trace.path).name, "source": r.trace.source, "per_thread": r.trace.per_thread,
            "simulator": r.trace.simulator, "unit": r.trace.unit, "notes": list(r.trace.notes),
            "unit_check": r.unit_check, "lanes": r.trace.lanes(),
            "graph": None if r.graph is None else {
                "hvx_us": r.graph.hvx_busy, "hmx_us": r.graph.hmx_busy, "overlap_us": r.graph.overlap,
                "percent_of_hmx": r.graph.percent_of_hmx, "hvx_threads": r.graph.hvx_threads,
                "span": list(r.graph.span)},
            "fused_nodes": [{"node": n.node, "task_us": n.task_busy, "own_hmx_us": n.hmx_busy, "overlap_us": n.overlap,
                             "percent_of_task": n.percent_of_task, "window": list(n.window), "task_ops": n.task_ops,
                             "hmx_ops": n.hmx_ops} for n in r.nodes],
        }
    return out


def window_png(trace: DeviceTrace, node: NodeOverlap, fused: tuple[str, str], margin: float = 0.25) -> bytes:
    """The fused node's window, one lane per hardware thread; the node's ops solid, others faint, the
    task op n own-HMX intersection shaded across the lanes."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lo, hi = node.window
    pad = max((hi - lo) * margin, 1e-9)
    lo, hi = lo - pad, hi + pad
    lanes = trace.lanes()
    colours = {"hmx": "#d62728", "hvx": "#1f77b4", "other": "#8c8c8c"}
    name, op_type = fused
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(lanes) + 1.6))
    tasks, hmx = [], []
    for op in trace.ops:
        if op.end < lo or op.start > hi:
            continue
        mine = _belongs(op, name, op_type, True)
        if mine and is_task_kernel(op.kernel):
            tasks.append((op.start, op.end))
        if mine and op.engine == "hmx":
            hmx.append((op.start, op.end))
        row = lanes.index(op.lane)
        ax.broken_barh([(op.start, max(op.end - op.start, (hi - lo) * 1e-3))], (row - 0.4, 0.8),
                       facecolors=colours[op.engine], alpha=1.0 if mine else 0.25,
                       edgecolor="black" if mine else "none",
                       hatch="//" if mine and is_task_kernel(op.kernel) else None)
    for a, b in intersect(tasks, hmx):
        ax.axvspan(a, b, color="#ffbf00", alpha=0.35, zorder=0)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlim(lo, hi)
    ax.set_xlabel(f"time ({trace.unit}{', simulator: not the device' if trace.simulator else ''})")
    ax.set_title(f"{name}: task op ∩ own HMX = {node.overlap:.1f} {trace.unit} "
                 f"({_pct(node.percent_of_task)} of the task op); hatched: task op, shaded: intersection")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()
