"""Fit per-op-class time factors of a target from a QNN EP detailed profile (``hexfuse calibrate``).

Profile CSV (onnxruntime-qnn, provider options profiling_level=detailed, profiling_file_path=x.csv):

    Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,Event Identifier
    0,BACKEND,596159,CYCLES,BACKEND,ROOT,Accelerator (execute) time (cycles)     <- one block per run
    0,NODE,532591,CYCLES,BACKEND,SUB-EVENT,conv0_token_1:OpId_22 (cycles)        <- per node, HTP cycles
    0,NODE,7700,CYCLES,BACKEND,SUB-EVENT,relu0:OpId_26 (cycles)

Node rows name the ONNX node (QNN may append ``_token_<n>``); rows of nodes QNN inserted itself
(``Input``, ``Output``, layout ``Transpose_token_4``) match no model node and are skipped. Rows are
mapped to nodes and engines by ``profile_rows`` (shared with ``hexfuse ab``). Per node the median over
runs is used; cycles become ns with the target's clock.

A Qualcomm AI Hub profiling job (``qai-hub``: ``ProfileJob.download_profile()``) gives JSON instead:

    {"execution_summary": {"estimated_inference_time": <us>, ...},
     "execution_detail": [{"name", "type", "compute_unit": "NPU", "execution_time": <us>, "execution_cycles"}, ...]}

Per-layer times there do not add up to the latency and folded ops show 0, so ``parse_hub_profile`` uses
them as relative weights scaled to the whole (``estimated_inference_time``); layers at 0 or off the NPU
are skipped. Layer names are QNN's (ONNX names with ``/`` and ``.`` turned into ``_``); they match model
nodes as profile_rows does, or after that same sanitising of both sides.

A profile from the x86 HTP simulator (the onnxruntime-qnn wheel on a PC) says nothing about a device:
``simulator_evidence`` recognises one (implied clock far below any Hexagon's, no HVX thread used) and
``hexfuse calibrate`` refuses it unless told ``--allow-simulator``.

Model: measured_n = dispatch_ns + hvx_launch_ns x [node runs on an HVX thread] + alone_time(node with
its class's main-engine time x f_class). Which nodes run on HVX (and how QNN slices them) comes from the
model's engine map where there is one (engine_map.py), else from the op-type rules.

    jointly:
        f_class   alone_time is monotone in f, so each class's f solves sum_n log(pred_n(f) / m_n) = 0
                  by bisection in log space (a DMA-bound class, where f changes nothing, keeps its factor)
        overheads dispatch_ns and hvx_launch_ns minimise sum_n log(pred_n / m_n)^2 on a grid refined
                  three times, each class's factor re-solved at every grid point (its nodes' engine time
                  scaled); they are separable because only HVX nodes pay the launch and node sizes
                  differ within a class (a profile without HVX nodes, or with nothing else, keeps
                  hvx_launch_ns; with one node per class the factors absorb both and the base's stay)

So the per-op constants that price entry merging are fitted from the same rows as the class factors.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
import io
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from hexfuse.graph_passes.cost import profile_rows
from hexfuse.graph_passes.cost.baselines import alone_plan, overhead_ns
from hexfuse.graph_passes.cost.opcost import OpCost, Storage, TaskCost, combine, node_cost, task_cost
from hexfuse.graph_passes.cost.simulate import Infeasible, simulate
from hexfuse.graph_passes.cost.target import Target
from hexfuse.graph_passes.engines.classify import Engine
from hexfuse.graph_passes.engines.engine_map import EngineMap
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import FusedOp, NodeSpec, TaskSpec

HEADER = ["Msg Timestamp", "Message", "Time", "Unit of Measurement", "Timing Source", "Event Level", "Event Identifier"]
ACCEL_CYCLES, ACCEL_TIME, HVX_THREADS = "Accelerator (execute) time (cycles)", "Accelerator (execute) time", \
    "Number of HVX threads used"
MIN_DEVICE_MHZ = 400  # HTP clocks of phones and PCs run from ~500 MHz up; the x86 simulator implied ~150
GRID = 48  # points per axis and refinement of the overhead search
PULL = 1e-4  # towards the base's overheads, against sum log^2: decides only where the rows cannot


@dataclass(frozen=True)
class ModelNodes:
    """Every node of a model with its tensors, as the cost model sees them."""

    nodes: dict[str, NodeSpec]
    storage: Storage


@dataclass(frozen=True)
class Fit:
    target: Target
    factors: dict[str, float]
    nodes_used: dict[str, int]  # op class -> matched nodes
    skipped: list[str]  # profile rows that match no model node
    residual: float  # median |log(pred/measured)| after the fit
    rows_by_engine: dict[str, int] = field(default_factory=dict)  # profile rows per engine (profile_rows)
    overheads: str = ""  # how dispatch_ns and hvx_launch_ns were obtained (fitted, or why kept)


def _rows(path: str | Path) -> csv.DictReader:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise HexfuseError(f"profile {path}: cannot read: {exc.strerror}") from None
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or "Event Identifier" not in reader.fieldnames:
        raise HexfuseError(f"profile {path}: not a QNN profiling CSV (no 'Event Identifier' column)")
    return reader


def simulator_evidence(path: str | Path) -> str | None:
    """Why the profile looks like the x86 HTP simulator's, or None when nothing says so."""
    pairs: list[float] = []  # cycles / microseconds of one run: the clock the profile implies, in MHz
    hvx: list[float] = []
    last_cycles = None
    for row in _rows(path):
        ident, unit = (row.get("Event Identifier") or "").strip(), (row.get("Unit of Measurement") or "").upper()
        try:
            value = float(row.get("Time") or "nan")
        except ValueError:
            continue
        if ident == ACCEL_CYCLES:
            last_cycles = value
        elif ident == ACCEL_TIME and unit == "US" and last_cycles is not None and value > 0:
            pairs.append(last_cycles / value)  # the US row follows the cycles row of the same run
            last_cycles = None
        elif ident == HVX_THREADS:
            hvx.append(value)
    reasons = []
    if pairs and statistics.median(pairs) < MIN_DEVICE_MHZ:
        reasons.append(f"implied HTP clock {statistics.median(pairs):.0f} MHz (accelerator cycles / microseconds), "
                       f"below any device's {MIN_DEVICE_MHZ} MHz")
    if hvx and max(hvx) == 0:
        reasons.append("'Number of HVX threads used' is 0 in every run")
    return "; ".join(reasons) or None


def parse_profile(path: str | Path) -> tuple[dict[str, float], int]:
    """(node name -> median cycles over runs, number of runs) from a QNN detailed profile CSV."""
    reader = _rows(path)
    runs = 0
    samples: dict[str, list[float]] = {}
    for row in reader:
        ident = (row.get("Event Identifier") or "").strip()
        if ident == "Accelerator (execute) time (cycles)":
            runs += 1
            continue
        if (row.get("Message") or "").strip() != "NODE" or (row.get("Unit of Measurement") or "").upper() != "CYCLES":
            continue
        name = profile_rows.row_name(ident)
        if name is None:
            continue
        try:
            cycles = float(row["Time"])
        except (TypeError, ValueError):
            raise HexfuseError(f"profile {path}: row {ident!r} has a non-numeric Time {row.get('Time')!r}") from None
        if not (math.isfinite(cycles) and cycles >= 0):
            raise HexfuseError(f"profile {path}: row {ident!r} has Time {row.get('Time')!r}: cycles must be a "
                               "finite number, not negative")
        samples.setdefault(name, []).append(cycles)
    if not samples:
        raise HexfuseError(f"profile {path}: no per-node cycle rows (was profiling_level=detailed?)")
    return {name: statistics.median(values) for name, values in samples.items()}, max(runs, 1)


def is_hub_profile(path: str | Path) -> bool:
    """A JSON profile of a Qualcomm AI Hub job (else: a QNN profiling CSV)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(64).lstrip().startswith("{")
    except OSError as exc:
        raise HexfuseError(f"profile {path}: cannot read: {exc.strerror}") from None


def parse_hub_profile(path: str | Path, clock_ghz: float) -> tuple[dict[str, float], int]:
    """(layer name -> cycles at ``clock_ghz``, 1) from an AI Hub profile JSON: each NPU layer's
    ``execution_time`` (else ``execution_cycles``) as a share of ``estimated_inference_time``."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise HexfuseError(f"profile {path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise HexfuseError(f"profile {path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    summary, detail = (raw.get("execution_summary"), raw.get("execution_detail")) if isinstance(raw, dict) else (None, None)
    if not isinstance(summary, dict) or not isinstance(detail, list):
        raise HexfuseError(f"profile {path}: not an AI Hub profile (no execution_summary / execution_detail)")
    total_us = summary.get("estimated_inference_time")
    if isinstance(total_us, bool) or not isinstance(total_us, (int, float)) or not 0 < total_us < math.inf:
        raise HexfuseError(f"profile {path}: execution_summary.estimated_inference_time must be a positive number "
                           f"of microseconds, got {total_us!r}")
    weights: dict[str, float] = {}
    for row in detail:
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            raise HexfuseError(f"profile {path}: an execution_detail row has no name")
        if row.get("compute_unit", "NPU") != "NPU":
            continue
        value = row.get("execution_time", row.get("execution_cycles", 0))
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            if not math.isfinite(value):
                raise HexfuseError(f"profile {path}: layer {row['name']!r} has execution time {value!r}")
            weights[row["name"]] = weights.get(row["name"], 0.0) + float(value)
    if not weights:
        raise HexfuseError(f"profile {path}: no NPU layer with a positive execution_time")
    scale = total_us * 1e3 * clock_ghz / sum(weights.values())  # share of the latency, as cycles
    return {name: weight * scale for name, weight in weights.items()}, 1


def read_profile(path: str | Path, clock_ghz: float) -> tuple[dict[str, float], int]:
    """Per-node cycles from a QNN profiling CSV or an AI Hub profile JSON."""
    return parse_hub_profile(path, clock_ghz) if is_hub_profile(path) else parse_profile(path)


_UNSAFE = re.compile(r"[^0-9A-Za-z]+")
_TOKEN = re.compile(r"_token_\d+$")


def _sanitised(name: str) -> str:
    return _UNSAFE.sub("_", name).strip("_")


def _matcher(nodes: dict[str, NodeSpec]):
    """profile_rows.match_node, then the same name with QNN's sanitising on both sides."""
    index = {_sanitised(name): node for name, node in nodes.items()}

    def match(name: str) -> NodeSpec | None:
        node = profile_rows.match_node(name, nodes)
        return node if node is not None else index.get(_sanitised(_TOKEN.sub("", name)))

    return match


def model_nodes(path: str | Path) -> ModelNodes:
    from hexfuse.graph_passes.analysis.facts import Analysis
    from hexfuse.graph_passes.load.model import load_model
    from hexfuse.graph_passes.spec.builder import node_spec, tensor_spec

    analysis = Analysis.of(load_model(path).inferred)
    flow = analysis.flow
    specs = [node_spec(node) for node in flow.nodes]
    names = dict.fromkeys(n for node in flow.nodes for n in (*node.input, *node.output) if n)
    tensors = tuple(tensor_spec(analysis, name) for name in names if flow.types.get(name) is not None)
    op = FusedOp("", "", (), (), (TaskSpec("model", "vector", tuple(specs), (), ()),), tensors)
    return ModelNodes({spec.name: spec for spec in specs if spec.name}, Storage(op))


def _body_ns(cost: OpCost, target: Target, factor: float) -> float:
    """The node alone on its engines, its class factor set to ``factor`` (no per-op overheads)."""
    scaled = replace(cost, main_ns=cost.main_ns * factor)
    kind = "matrix" if cost.op_class in ("conv", "matmul", "depthwise") else "vector"
    return simulate([alone_plan(combine(cost.node, kind, (scaled,)), target)]).makespan


def _launched(cost: OpCost) -> bool:
    return cost.engine == "hvx"  # the HTP scheduler launches it on an HVX thread and waits for it


def node_ns(cost: OpCost, target: Target, factor: float) -> float:
    """Predicted time of one node run as its own QNN op, with its class factor set to ``factor``."""
    overhead = target.dispatch_ns + (target.hvx_launch_ns if _launched(cost) else 0.0)
    return overhead + _body_ns(cost, target, factor)


def _unit_costs(nodes: ModelNodes, base: Target, engines: EngineMap | None = None) -> dict[str, OpCost]:
    """Node costs with every class factor 1 (the factor is what calibration solves for)."""
    neutral = replace(base, factors={})
    out = {}
    for name, node in nodes.nodes.items():
        cost = node_cost(node, nodes.storage, neutral, engines.node(name) if engines is not None else None)
        if cost is not None and cost.engine != "none":
            out[name] = cost
    return out


_FACTORS = np.geomspace(1e-2, 1e2, 161)  # where each node's engine time is tabulated for the joint fit


def _body_table(costs: list[OpCost], target: Target) -> np.ndarray:
    """log engine time of each node at every factor of _FACTORS (the simulator is monotone in it)."""
    return np.log(np.maximum([[_body_ns(c, target, f) for f in _FACTORS] for c in costs], 1e-9))


def _bodies_at(table: np.ndarray, idx: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """Engine times of nodes ``idx`` at ``factor`` (any shape): log-log interpolation in the table."""
    logs = np.log(_FACTORS)
    flat = np.log(factor).ravel()
    return np.exp(np.stack([np.interp(flat, logs, table[n]) for n in idx], axis=-1)).reshape(factor.shape + (len(idx),))


def _class_factors(fixed: np.ndarray, table: np.ndarray, logs: np.ndarray, members: list[np.ndarray]) -> list[np.ndarray]:
    """Per grid point and class, the factor f that zeroes sum log((fixed + body(f)) / m) over the class's
    nodes (bisection in log space, vectorised over the grid); None where no factor explains them."""
    out = []
    for idx in members:
        def g(factor: np.ndarray) -> np.ndarray:
            return (np.log(fixed[..., idx] + _bodies_at(table, idx, factor)) - logs[idx]).sum(axis=-1)

        lo, hi = np.full(fixed.shape[:-1], _FACTORS[0]), np.full(fixed.shape[:-1], _FACTORS[-1])
        ok = (g(lo) < 0) & (g(hi) > 0)
        for _ in range(40):
            mid = np.sqrt(lo * hi)
            below = g(mid) < 0
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        out.append(np.where(ok, np.sqrt(lo * hi), 1.0))
    return out


def _fit_overheads(table: np.ndarray, launched: np.ndarray, measured: np.ndarray, classes: np.ndarray,
                   start: tuple[float, float], fit_launch: bool) -> tuple[float, float]:
    """(dispatch_ns, hvx_launch_ns) minimising sum log(pred / measured)^2, each class's factor re-solved
    at every point; hvx_launch_ns stays unless ``fit_launch``. Where the rows cannot tell (every class
    one node: the factors absorb any constant) a tiny pull towards ``start`` keeps the base's values."""
    logs = np.log(measured)
    members = [np.flatnonzero(classes == k) for k in range(int(classes.max()) + 1)]
    d_lo, d_hi = 0.0, float(measured.min())
    l_lo, l_hi = (0.0, float(measured[launched].min())) if fit_launch else (start[1], start[1])
    best = start
    for _ in range(3):
        ds = np.linspace(d_lo, d_hi, GRID)
        ls = np.linspace(l_lo, l_hi, GRID) if fit_launch else np.array([start[1]])
        fixed = ds[:, None, None] + ls[None, :, None] * launched[None, None, :]
        pred = np.array(fixed, copy=True)
        for idx, factor in zip(members, _class_factors(fixed, table, logs, members)):
            pred[..., idx] += _bodies_at(table, idx, factor)
        error = ((np.log(pred) - logs) ** 2).sum(axis=-1)
        error += PULL * (((ds[:, None] - start[0]) / max(start[0], 1.0)) ** 2
                         + ((ls[None, :] - start[1]) / max(start[1], 1.0)) ** 2)
        i, j = np.unravel_index(int(np.argmin(error)), error.shape)
        best = (float(ds[i]), float(ls[j]))
        d_step, l_step = (d_hi - d_lo) / (GRID - 1), (l_hi - l_lo) / (GRID - 1)
        d_lo, d_hi = max(0.0, best[0] - d_step), best[0] + d_step
        if fit_launch:
            l_lo, l_hi = max(0.0, best[1] - l_step), best[1] + l_step
    return best


def _solve(costs: list[OpCost], measured: list[float], target: Target, old: float) -> float:
    def g(factor: float) -> float:
        return sum(math.log(node_ns(c, target, factor) / m) for c, m in zip(costs, measured))

    lo, hi = 1e-3, 1e3
    if g(lo) >= 0 or g(hi) <= 0 or abs(g(hi) - g(lo)) < 1e-6:
        return old  # the factor cannot explain these times (e.g. DMA-bound nodes)
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if g(mid) < 0 else (lo, mid)
    return math.sqrt(lo * hi)


def fit_profile(profile: str | Path, model: str | Path, base: Target, engines: EngineMap | None = None,
                overheads: bool = True) -> Fit:
    """Class factors, and with ``overheads`` dispatch_ns and hvx_launch_ns, fitted to ``profile``."""
    cycles, _ = read_profile(profile, base.clock_ghz)
    nodes = model_nodes(model)
    units = _unit_costs(nodes, base, engines)
    by_class: dict[str, tuple[list[OpCost], list[float]]] = {}
    skipped = []
    match = _matcher(nodes.nodes)
    for name, value in cycles.items():
        node = match(name)
        cost = units.get(node.name) if node is not None else None
        if cost is None or value <= 0:
            skipped.append(name)
            continue
        group = by_class.setdefault(cost.op_class, ([], []))
        group[0].append(cost)
        group[1].append(value / base.clock_ghz)
    if not by_class:
        raise HexfuseError(f"profile {profile}: no row matches a node of {model} (is it the profiled model?)")
    neutral = replace(base, factors={})
    factors = dict(base.factors)
    flat = [(cls, c, m) for cls, (costs, measured) in sorted(by_class.items()) for c, m in zip(costs, measured)]
    launched = np.array([_launched(c) for _, c, _ in flat])
    measured_ns = np.array([m for _, _, m in flat])
    fit_launch = bool(launched.any() and not launched.all())
    if overheads:
        class_ids = {cls: k for k, cls in enumerate(sorted(by_class))}
        classes = np.array([class_ids[cls] for cls, _, _ in flat])
        table = _body_table([c for _, c, _ in flat], neutral)
        dispatch, launch = _fit_overheads(table, launched, measured_ns, classes,
                                          (neutral.dispatch_ns, neutral.hvx_launch_ns), fit_launch)
        neutral = replace(neutral, dispatch_ns=dispatch, hvx_launch_ns=launch)
    for cls, (costs, measured) in sorted(by_class.items()):  # exact factors at the fitted overheads
        factors[cls] = _solve(costs, measured, neutral, base.factor(cls))
    residuals = [abs(math.log(node_ns(c, neutral, factors[cls]) / m)) for cls, c, m in flat]
    sources = dict(base.sources)
    for cls, (costs, _) in by_class.items():
        sources[f"factors.{cls}"] = f"fitted from {Path(profile).name} ({len(costs)} nodes of {Path(model).name})"
    how = "kept from the base target"
    if overheads:
        rows = f"fitted from {Path(profile).name} ({len(flat)} nodes of {Path(model).name})"
        sources["dispatch_ns"] = rows
        how = f"dispatch_ns {neutral.dispatch_ns:.0f} ns"
        if fit_launch:
            sources["hvx_launch_ns"] = f"{rows}, {int(launched.sum())} of them on HVX threads"
            how += f", hvx_launch_ns {neutral.hvx_launch_ns:.0f} ns fitted"
        else:
            how += (f" fitted; hvx_launch_ns {neutral.hvx_launch_ns:.0f} ns kept (the profile has "
                    f"{'only' if launched.all() else 'no'} nodes on HVX threads: it cannot tell the two apart)")
    fitted = replace(base, factors=factors, sources=sources, dispatch_ns=neutral.dispatch_ns,
                     hvx_launch_ns=neutral.hvx_launch_ns)
    op_types = {name: (node.op_type, node.domain) for name, node in nodes.nodes.items()}
    rows = Counter(profile_rows.row_engine(name, op_types)[1] for name in cycles)
    return Fit(fitted, factors, {c: len(v[0]) for c, v in by_class.items()}, skipped, statistics.median(residuals),
               dict(sorted(rows.items())), how)


def synthesize_profile(model: str | Path, target: Target, runs: int = 3, engines: EngineMap | None = None) -> str:
    """A profile CSV in QNN's format with the times ``target`` predicts (calibration tests, dry runs)."""
    nodes = model_nodes(model)
    units = _unit_costs(nodes, target, engines)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    for _ in range(runs):
        writer.writerow([0, "BACKEND", 1, "CYCLES", "BACKEND", "ROOT", "Accelerator (execute) time (cycles)"])
        writer.writerow([0, "NODE", 3000, "CYCLES", "BACKEND", "SUB-EVENT", "Input OpId_2 (cycles)"])
        for op_id, (name, cost) in enumerate(units.items(), start=10):
            ns = node_ns(cost, replace(target, factors={}), target.factor(cost.op_class))
            label = f"{name}_token_{op_id}" if op_id % 2 else name
            writer.writerow([0, "NODE", round(ns * target.clock_ghz), "CYCLES", "BACKEND", "SUB-EVENT",
                             f"{label}:OpId_{op_id} (cycles)"])
        writer.writerow([0, "NODE", 2000, "CYCLES", "BACKEND", "SUB-EVENT", "Output OpId_3 (cycles)"])
    return out.getvalue()


# -- whole-model latencies: published tables (hexfuse calibrate --published, tools/bench/bench_anchors.py) ----------
#
#   predicted(model, target) = Σ tasks [ alone(task)                      engine time, simulate.py
#                                      + dispatch_ns x QNN ops of task    one per compute node
#                                      + hvx_launch_ns x its HVX ops ]     launch/wait on an HVX thread
#
# is baseline 1 of every task: the ``serial_us`` of ``hexfuse analyze --json`` (summary.py), the original
# model as QNN runs it. Units the cost model cannot price add nothing and are counted. The fit, per target:
#
#   minimise  Σ_rows (log predicted / published)^2  +  LATENCY_RIDGE x Σ_params (log θ / θ_base)^2
#
#   θ = dispatch_ns, hvx_launch_ns (per-op overheads), hmx_int8/fp16_macs_per_cycle (w8a8 rows run int8,
#       float rows fp16), dma_gbps and ddr_npu_fraction (weights stream from DDR every run), and the
#       factor of every op class present but conv (conv is the HMX rates)
#
# by Levenberg-Marquardt on log θ, forward-difference Jacobians. alone(task) depends only on the
# parameters of the classes and engines the task uses, so it is cached per (task structure, those
# parameters) and a Jacobian column re-simulates only the tasks its parameter touches. The ridge keeps
# a parameter no row constrains at its estimate; a class run by fewer than LATENCY_MIN_MODELS models keeps its factor
#
# A QDQ model is priced as ``hexfuse analyze`` prices it: a task's ports carry the encoding of the DQ / Q
# at its boundary (TensorSpec.wire), so its weights and boundary activations are stored quantized and a DQ
# of an initializer is static (opcost.Storage): what QNN runs.
# Held out: models go round robin into LATENCY_FOLDS folds; each fold is predicted by a fit on the others
# (both precisions of a model are held out together: they share the architecture).

LATENCY_RIDGE = 0.02
LATENCY_FOLDS = 5
LATENCY_ITERATIONS = 10
LATENCY_MIN_MODELS = 3  # a class factor is fitted only when this many models run the class
LATENCY_RESIDENT_MB = (1.0, 2.0, 4.0)  # resident_mb is a threshold: tried on this grid, not by the gradient
LATENCY_MAX_STEP = 20.0  # a fitted value stays within base / LATENCY_MAX_STEP .. base x LATENCY_MAX_STEP
LATENCY_SCALARS = ("dispatch_ns", "hvx_launch_ns", "hmx_int8_macs_per_cycle", "hmx_fp16_macs_per_cycle", "dma_gbps",
                   "ddr_npu_fraction")
LATENCY_CLASSES = ("depthwise", "elementwise", "transcendental", "norm", "softmax", "pool", "reduce", "datamove", "matmul")


@dataclass
class ModelCase:
    """One exported model: its tasks by structure, ready to price on any target."""

    model: str
    precision: str
    path: str
    tasks: dict[tuple, tuple[int, FusedOp]]  # structure key -> (tasks of that structure, spec of one)
    unpriced_units: int = 0

    def costs(self, op: FusedOp, target: Target) -> list[TaskCost]:
        storage = Storage(op)
        return [task_cost(task, op, target, storage) for task in op.tasks]

    @classmethod
    def load(cls, model: str, precision: str, path: str | Path) -> ModelCase:
        from hexfuse.graph_passes.analysis.facts import Analysis
        from hexfuse.graph_passes.load.model import load_model
        from hexfuse.graph_passes.spec.builder import fused_op_spec

        loaded = load_model(path).inferred
        analysis = Analysis.of(loaded)
        tasks: dict[tuple, tuple[int, FusedOp]] = {}
        counts: Counter = Counter()
        for task in analysis.tasks:
            if task.engine is Engine.FREE:
                continue
            key = analysis.structures.task(task)
            counts[key] += 1
            if key not in tasks:
                tasks[key] = (0, fused_op_spec(analysis, (task,)))
        blocked = sum(1 for b in analysis.units.blocker if b is not None and "computes a constant" not in b)
        return cls(model, precision, str(path), {k: (counts[k], op) for k, (_, op) in tasks.items()}, blocked)


@dataclass(frozen=True)
class ModelLatency:
    serial_ns: float
    unpriced_units: int  # units in no task plus units of tasks without a feasible tile


def model_latency(case: ModelCase, target: Target) -> ModelLatency:
    """The whole model's serial latency on ``target`` (summary.summarize's serial_ns, without groups)."""
    total, unpriced = 0.0, case.unpriced_units
    for count, op in case.tasks.values():
        costs = case.costs(op, target)
        try:
            alone = sum(simulate([alone_plan(c, target)]).makespan for c in costs)
        except Infeasible:
            unpriced += count * sum(len(t.nodes) for t in op.tasks)
            continue
        total += count * (alone + overhead_ns(costs, target))
    return ModelLatency(total, unpriced)


# -- the fit ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyRow:
    case: ModelCase
    milliseconds: float  # published


@dataclass
class _TaskFacts:
    case: ModelCase
    count: int
    op: FusedOp
    params: tuple[int, ...]  # indexes of the parameters alone() depends on
    dispatches: int
    launches: int


@dataclass
class LatencyModel:
    """The parameter vector <-> Target mapping and a cache of alone() per task and relevant parameters."""

    base: Target
    names: list[str]  # "dispatch_ns", ..., "factors.pool"
    caps: dict[str, float] = field(default_factory=dict)  # upper bounds from outside the rows (e.g. v73 <= v75)
    _facts: dict[int, list[_TaskFacts]] = field(default_factory=dict)
    _alone: dict[tuple, float | None] = field(default_factory=dict)

    @classmethod
    def for_cases(cls, base: Target, cases: list[ModelCase]) -> LatencyModel:
        model = cls(base, list(LATENCY_SCALARS))
        models_of: dict[str, set[str]] = {}  # op class -> models that run it
        for case in cases:
            for _, op in case.tasks.values():
                for c in (c for cost in case.costs(op, base) for c in cost.original.ops):
                    models_of.setdefault(c.op_class, set()).add(case.model)
        # a class in fewer models would be a per-model correction (softmax: ViT alone), not a rate
        model.names += [f"factors.{c}" for c in LATENCY_CLASSES if len(models_of.get(c, ())) >= LATENCY_MIN_MODELS]
        return model

    def start(self) -> np.ndarray:
        return np.log([self.value(self.base, name) for name in self.names])

    @staticmethod
    def value(target: Target, name: str) -> float:
        return target.factor(name.split(".", 1)[1]) if name.startswith("factors.") else float(getattr(target, name))

    def target(self, logs: np.ndarray) -> Target:
        values = dict(zip(self.names, np.exp(logs)))
        factors = dict(self.base.factors)
        scalars = {}
        for name, value in values.items():
            if name.startswith("factors."):
                factors[name.split(".", 1)[1]] = float(value)
            else:
                scalars[name] = float(value)
        scalars["ddr_npu_fraction"] = min(1.0, scalars["ddr_npu_fraction"])
        scalars["hmx_fp16_macs_per_cycle"] = min(scalars["hmx_fp16_macs_per_cycle"], scalars["hmx_int8_macs_per_cycle"])
        return replace(self.base, factors=factors, **scalars)

    def _task_facts(self, case: ModelCase) -> list[_TaskFacts]:
        known = self._facts.get(id(case))
        if known is not None:
            return known
        index = {name: i for i, name in enumerate(self.names)}
        out = []
        for count, op in case.tasks.values():
            costs = case.costs(op, self.base)
            ops = [c for cost in costs for c in cost.original.ops]
            params = {index[f"factors.{c.op_class}"] for c in ops if f"factors.{c.op_class}" in index}
            if any(c.engine == "hmx" for c in ops):
                params |= {index["hmx_int8_macs_per_cycle"], index["hmx_fp16_macs_per_cycle"]}
            if any(c.ddr_in or c.ddr_out for c in costs):
                params |= {index["dma_gbps"], index["ddr_npu_fraction"]}
            out.append(_TaskFacts(case, count, op, tuple(sorted(params)),
                                  sum(c.original.dispatches for c in costs), sum(c.original.hvx_ops for c in costs)))
        self._facts[id(case)] = out
        return out

    def _alone_ns(self, facts: _TaskFacts, logs: np.ndarray, target: Target) -> float | None:
        key = (id(facts.op), tuple(round(float(logs[i]), 9) for i in facts.params))
        if key not in self._alone:
            costs: list[TaskCost] = facts.case.costs(facts.op, target)
            try:
                self._alone[key] = sum(simulate([alone_plan(c, target)]).makespan for c in costs)
            except Infeasible:
                self._alone[key] = None
        return self._alone[key]

    def predict_ns(self, case: ModelCase, logs: np.ndarray) -> float:
        target = self.target(logs)
        total = 0.0
        for facts in self._task_facts(case):
            alone = self._alone_ns(facts, logs, target)
            if alone is not None:
                total += facts.count * (alone + target.dispatch_ns * facts.dispatches
                                        + target.hvx_launch_ns * facts.launches)
        return total


@dataclass(frozen=True)
class LatencyFit:
    target: Target
    logs: np.ndarray
    names: list[str]
    rows: int
    cost: float  # final objective
    model: LatencyModel = field(compare=False, repr=False)

    def values(self) -> dict[str, float]:
        """Every fitted constant by name, resident_mb (the grid's choice) included."""
        return {**{name: LatencyModel.value(self.target, name) for name in self.names},
                "resident_mb": self.target.resident_mb}

    def predict_ns(self, case: ModelCase) -> float:
        return self.model.predict_ns(case, self.logs)


def _latency_residuals(model: LatencyModel, rows: list[LatencyRow], logs: np.ndarray, start: np.ndarray) -> np.ndarray:
    errors = [math.log(max(model.predict_ns(r.case, logs), 1.0) / (r.milliseconds * 1e6)) for r in rows]
    return np.concatenate([errors, math.sqrt(LATENCY_RIDGE) * (logs - start)])


def latency_models(base: Target, cases: list[ModelCase], overheads: bool = True,
                   caps: dict[str, float] | None = None) -> dict[float, LatencyModel]:
    """One LatencyModel per resident_mb of the grid (a threshold: the prediction is piecewise constant in it)."""
    out = {}
    for resident in sorted({base.resident_mb, *LATENCY_RESIDENT_MB}):
        if resident <= base.vtcm_mb:
            model = LatencyModel.for_cases(replace(base, resident_mb=resident), cases)
            model.caps = dict(caps or {})
            if not overheads:
                model.names = [n for n in model.names if n not in ("dispatch_ns", "hvx_launch_ns")]
            out[resident] = model
    return out


def _fit_one(rows: list[LatencyRow], model: LatencyModel, iterations: int) -> LatencyFit:
    start = model.start()
    low, high = start - math.log(LATENCY_MAX_STEP), start + math.log(LATENCY_MAX_STEP)
    high[model.names.index("ddr_npu_fraction")] = 0.0
    for name, cap in model.caps.items():
        i = model.names.index(name)
        high[i] = min(high[i], math.log(cap))
        start[i] = min(start[i], high[i])
    logs = start.copy()
    r = _latency_residuals(model, rows, logs, start)
    damping, step = 1e-2, 0.03
    for _ in range(iterations):
        jac = np.empty((len(r), len(logs)))
        for j in range(len(logs)):
            moved = logs.copy()
            moved[j] += step if moved[j] + step <= high[j] else -step
            jac[:, j] = (_latency_residuals(model, rows, moved, start) - r) / (moved[j] - logs[j])
        improved = False
        for _ in range(8):
            lhs = jac.T @ jac + damping * np.diag(np.diag(jac.T @ jac) + 1e-9)
            trial = np.clip(logs - np.linalg.solve(lhs, jac.T @ r), low, high)
            r_trial = _latency_residuals(model, rows, trial, start)
            if r_trial @ r_trial < r @ r - 1e-12:
                improved = (r @ r - r_trial @ r_trial) > 1e-4 * (r @ r)
                logs, r, damping = trial, r_trial, max(damping / 3, 1e-6)
                break
            damping *= 4
        if not improved:
            break
    return LatencyFit(model.target(logs), logs, list(model.names), len(rows), float(r @ r), model)


def fit_latencies(rows: list[LatencyRow], base: Target, iterations: int = LATENCY_ITERATIONS,
                  models: dict[float, LatencyModel] | None = None) -> LatencyFit:
    """Levenberg-Marquardt on log θ at every resident_mb of the grid; the lowest objective wins."""
    models = models or latency_models(base, [r.case for r in rows])
    return min((_fit_one(rows, model, iterations) for model in models.values()), key=lambda fit: fit.cost)


def model_folds(models: list[str], k: int = LATENCY_FOLDS) -> list[set[str]]:
    ordered = sorted(set(models))
    return [set(ordered[i::k]) for i in range(min(k, len(ordered)))]


def held_out_latencies(rows: list[LatencyRow], base: Target, k: int = LATENCY_FOLDS,
                       iterations: int = LATENCY_ITERATIONS, models: dict[float, LatencyModel] | None = None
                       ) -> dict[int, float]:
    """Row index -> predicted ns by a fit that did not see that row's model (k-fold over models)."""
    models = models or latency_models(base, [r.case for r in rows])
    out: dict[int, float] = {}
    for fold in model_folds([r.case.model for r in rows], k):
        result = fit_latencies([r for r in rows if r.case.model not in fold], base, iterations, models)
        for i, row in enumerate(rows):
            if row.case.model in fold:
                out[i] = result.predict_ns(row.case)
    return out


def latency_errors(predicted_ns: list[float], published_ms: list[float]) -> list[float]:
    """Absolute relative error of each prediction against its published figure."""
    return [abs(p / (m * 1e6) - 1.0) for p, m in zip(predicted_ns, published_ms)]


def error_summary(errs: list[float]) -> tuple[float, float]:
    """(median, worst) absolute relative error."""
    return (statistics.median(errs), max(errs)) if errs else (float("nan"), float("nan"))


# -- a published table as calibration input ------------------------------------------------------------------

PUBLISHED_COLUMNS = ("model", "chipset", "precision", "milliseconds")  # required; tools/anchors/published.py has all
MODEL_FILES = {"float": "{model}.onnx", "w8a8": "{model}_w8a8.onnx"}  # tools/anchors/zoo.py writes these
DEFAULT_MODELS = Path.home() / ".cache" / "hexfuse" / "anchors"


def read_published(path: str | Path) -> list[dict[str, str]]:
    """Rows of a published-latency table (CSV): each a dict of its columns, ``milliseconds`` checked."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # (-sig: a spreadsheet's "CSV UTF-8" starts with a BOM)
    except OSError as exc:
        raise HexfuseError(f"published table {path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise HexfuseError(f"published table {path}: not a CSV table (not UTF-8 text)") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in PUBLISHED_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise HexfuseError(f"published table {path}: missing column {missing[0]!r} (needs {', '.join(PUBLISHED_COLUMNS)})")
    rows = []
    for line, raw in enumerate(reader, start=2):
        try:
            ms = float(raw["milliseconds"])
        except (TypeError, ValueError):
            raise HexfuseError(f"published table {path}: line {line}: milliseconds {raw['milliseconds']!r} "
                               "is not a number") from None
        if not 1e-6 <= ms <= 1e7:  # a nanosecond to three hours: anything else is a unit or typing error
            raise HexfuseError(f"published table {path}: line {line}: milliseconds {raw['milliseconds']!r} "
                               "must be a number from 1e-6 to 1e7")
        if raw["precision"] not in MODEL_FILES:
            raise HexfuseError(f"published table {path}: line {line}: precision {raw['precision']!r} "
                               f"(known: {', '.join(MODEL_FILES)})")
        rows.append({key: (value or "") for key, value in raw.items() if key is not None})
    return rows


def published_model_path(row: dict[str, str], table: str | Path, models: str | Path | None) -> Path:
    """The row's ``onnx`` column (relative to the table), else ``models``/<model>[_w8a8].onnx."""
    if row.get("onnx"):
        return (Path(table).parent / row["onnx"]).resolve()
    return Path(models or DEFAULT_MODELS) / MODEL_FILES[row["precision"]].format(model=row["model"])


def fit_published(table: str | Path, base: Target, chipset: str, models: str | Path | None = None,
                  overheads: bool = True) -> tuple[Target, str]:
    """A target fitted to the table's rows of ``chipset`` (``hexfuse calibrate --published``), and a note."""
    rows = [r for r in read_published(table) if r["chipset"] == chipset]
    if not rows:
        raise HexfuseError(f"published table {table}: no row for chipset {chipset!r} (--chipset)")
    cases: dict[Path, ModelCase] = {}
    fit_rows, missing = [], []
    for row in rows:
        path = published_model_path(row, table, models)
        if not path.is_file():
            missing.append(path.name)
            continue
        if path not in cases:
            cases[path] = ModelCase.load(row["model"], row["precision"], path)
        fit_rows.append(LatencyRow(cases[path], float(row["milliseconds"])))
    if not fit_rows:
        raise HexfuseError(f"published table {table}: no model file for any {chipset} row (first missing: "
                           f"{missing[0]}; --models DIR, or tools/anchors/zoo.py to export them)")
    models = latency_models(base, [r.case for r in fit_rows], overheads)
    before = [model_latency(r.case, base).serial_ns for r in fit_rows]
    result = fit_latencies(fit_rows, base, models=models)
    after = [result.predict_ns(r.case) for r in fit_rows]
    published = [r.milliseconds for r in fit_rows]
    source = (f"fit: {Path(table).name} ({len(fit_rows)} rows, {len(cases)} models, {chipset}), least squares on "
              f"log(predicted/published) whole-model latency (hexfuse calibrate --published)")
    sources = dict(base.sources)
    sources.update({name: source for name in result.values()})
    fitted = replace(result.target, sources=sources)
    b, a = error_summary(latency_errors(before, published)), error_summary(latency_errors(after, published))
    moved = ", ".join(f"{n} {LatencyModel.value(base, n):.3g}->{v:.3g}" for n, v in result.values().items()
                      if abs(v / LatencyModel.value(base, n) - 1) > 1e-3)
    note = (f"{len(fit_rows)} rows ({len(missing)} without a model file); median |error| {b[0]:.0%} -> {a[0]:.0%} "
            f"(worst {b[1]:.0%} -> {a[1]:.0%}, in sample; tools/bench/bench_anchors.py --fit reports held-out errors); {moved}")
    return fitted, note
