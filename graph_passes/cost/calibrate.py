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
from collections import Counter
import io
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from hexfuse.graph_passes.cost import profile_rows
from hexfuse.graph_passes.cost.baselines import alone_plan
from hexfuse.graph_passes.cost.opcost import OpCost, Storage, combine, node_cost
from hexfuse.graph_passes.engine_map import EngineMap
from hexfuse.graph_passes.cost.simulate import simulate
from hexfuse.graph_passes.cost.target import Target
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec import FusedOp, NodeSpec, TaskSpec

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
            samples.setdefault(name, []).append(float(row["Time"]))
        except (TypeError, ValueError):
            raise HexfuseError(f"profile {path}: row {ident!r} has a non-numeric Time {row.get('Time')!r}") from None
    if not samples:
        raise HexfuseError(f"profile {path}: no per-node cycle rows (was profiling_level=detailed?)")
    return {name: statistics.median(values) for name, values in samples.items()}, max(runs, 1)


def model_nodes(path: str | Path) -> ModelNodes:
    from hexfuse.graph_passes.analysis import Analysis
    from hexfuse.graph_passes.load import load_model
    from hexfuse.graph_passes.spec_builder import node_spec, tensor_spec

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
    cycles, _ = parse_profile(profile)
    nodes = model_nodes(model)
    units = _unit_costs(nodes, base, engines)
    by_class: dict[str, tuple[list[OpCost], list[float]]] = {}
    skipped = []
    for name, value in cycles.items():
        node = profile_rows.match_node(name, nodes.nodes)
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
