"""Fit the replay's per-op constants to published phone latencies (issue 20 meets the schedule replay).

    python tools/bench/fit_replay.py --published tools/anchors/published.csv --models DIR [--target sm8650]

For each published row of the target's chipset (model, precision, milliseconds), the model exported at
its published input shape (``DIR/<model>.onnx``, ``DIR/<model>_w8a8.onnx``: tools/bench/bench_anchors.py writes
them) is prepared on the QNN EP's HTP simulator with optrace once (its engine map, cached beside this
run's output), and QNN's own schedule is replayed (graph_passes/cost/replay.py) over a grid of the
figures a schedule cannot tell: ``qnn_op_ns`` (each main-thread op's own time) and ``qnn_hvx_op_ns``
(each HVX-list op's launch and wait); ``--hmx-scales`` also tries scales of the target's HMX rates
(printed, never written). The grid point with the least mean
|log(replayed / published)| is the fit; held-out errors come from leaving each model out in turn.
Prints before (the target's figures) and after, and with ``--write`` stores the fit in the target file.

    python tools/bench/fit_replay.py --joint [--cached-only] [--vision-maps DIR] [--write]      # issue 43

``--joint`` fits what the flat constants could not (docs/anchors.md section 10): the per-op constant's floor share
and half-way work (``qnn_op_floor_fraction``, ``qnn_op_half_ns``) and QNN's HVX streaming rate
(``qnn_hvx_rate_scale``), shared by sm8650 and sm8750, and per target the sustained DDR share
(``ddr_sustained_fraction``) and each graph execution's own cost (``graph_execute_ns``), on the vision rows
(float; tools/anchors/light.py's graphs, their maps in ``--vision-maps``) and the LLM rows of
tools/anchors/llm_published.csv (tools/llm_predict.py: whole-model time from one deployed layer) together, held out
by leaving each model out.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QNN_OP_NS = (100, 200, 300, 500, 700, 1000, 1500, 2200, 3000)
HVX_OP_NS = (50, 100, 200, 400, 700, 1000, 1500, 2200, 3000, 4500, 6000)
HMX_SCALES = (1.0,)  # the target's HMX rates as they are (fitted with the serial model: docs/anchors.md)


@dataclass(frozen=True)
class Row:
    model: str
    precision: str
    published_ms: float
    runtime: str


def published_rows(path: Path, chipset: str) -> list[Row]:
    with path.open(newline="", encoding="utf-8") as handle:
        return [Row(r["model"], r["precision"], float(r["milliseconds"]), r["runtime"])
                for r in csv.DictReader(handle) if r["chipset"] == chipset]


def schedule_of(model: Path, target: str, cache: Path):
    """QNN's schedule of ``model`` (engine map made once with `hexfuse engines`, kept in ``cache``)."""
    from hexfuse.graph_passes.engines.engine_map import load_engine_map
    from hexfuse.tools.qnn_engines import build_engine_map

    out = cache / f"{model.stem}.{target}.json"
    if not out.is_file():
        print(f"fit_replay: preparing {model.name} on the HTP simulator (optrace)", file=sys.stderr, flush=True)
        build_engine_map(model, target).write(out)
    return load_engine_map(out).schedule


def replayed_ms(schedule, target, qnn_op_ns: float, hvx_op_ns: float, hmx_scale: float) -> float:
    from hexfuse.graph_passes.cost.replay import graph_of, op_costs, replay

    tuned = target.with_values(qnn_op_ns=qnn_op_ns, qnn_hvx_op_ns=hvx_op_ns,
                               hmx_int8_macs_per_cycle=target.hmx_int8_macs_per_cycle * hmx_scale,
                               hmx_fp16_macs_per_cycle=target.hmx_fp16_macs_per_cycle * hmx_scale)
    return replay(graph_of(schedule, op_costs(schedule, tuned)), tuned.hvx_contexts).latency_ns / 1e6


def _error(predicted: float, published: float) -> float:
    return abs(math.log(predicted / published))


def main(argv: list[str] | None = None) -> int:
    from hexfuse.graph_passes.cost.target import load_target
    from hexfuse.graph_passes.errors import HexfuseError

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--published", type=Path, default=ROOT / "tools" / "anchors" / "published.csv")
    parser.add_argument("--models", type=Path, default=Path.home() / ".cache" / "hexfuse" / "anchors")
    parser.add_argument("--maps", type=Path, default=Path.home() / ".cache" / "hexfuse" / "anchor_maps")
    parser.add_argument("--target", default="sm8650")
    parser.add_argument("--only", nargs="*", help="these models only")
    parser.add_argument("--hmx-scales", nargs="*", type=float, default=list(HMX_SCALES),
                        help="scales of the target's HMX rates to try (default: 1 only)")
    parser.add_argument("--write", action="store_true", help="store the fit in qnn_configs/targets/<target>.json")
    args = parser.parse_args(argv)
    target = load_target(args.target)
    args.maps.mkdir(parents=True, exist_ok=True)
    rows, schedules = [], {}
    for row in published_rows(args.published, target.name):
        if args.only and row.model not in args.only:
            continue
        file = args.models / (f"{row.model}_w8a8.onnx" if row.precision == "w8a8" else f"{row.model}.onnx")
        if not file.is_file():
            continue
        try:
            schedules[(row.model, row.precision)] = schedule_of(file, target.name, args.maps)
        except HexfuseError as exc:
            print(f"fit_replay: {file.name}: the simulator did not prepare it ({exc})", file=sys.stderr)
            continue
        rows.append(row)
    if len(rows) < 3:
        raise SystemExit(f"fit_replay: {len(rows)} rows with a model and a schedule: too few to fit")
    grid = list(itertools.product(QNN_OP_NS, HVX_OP_NS, args.hmx_scales))
    predicted = {point: [replayed_ms(schedules[(r.model, r.precision)], target, *point) for r in rows] for point in grid}
    before = [replayed_ms(schedules[(r.model, r.precision)], target, target.qnn_op_ns, target.qnn_hvx_op_ns, 1.0) for r in rows]

    def best(keep: list[int]) -> tuple[float, float, float]:
        return min(grid, key=lambda p: statistics.fmean(_error(predicted[p][i], rows[i].published_ms) for i in keep))

    fitted = best(list(range(len(rows))))
    models = sorted({r.model for r in rows})
    held_out = [0.0] * len(rows)
    for model in models:  # leave one model (both precisions) out
        point = best([i for i, r in enumerate(rows) if r.model != model])
        for i, r in enumerate(rows):
            if r.model == model:
                held_out[i] = predicted[point][i]
    print(f"| model | precision | published ms ({target.name}) | replay, target's figures | replay, fit | held out |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        print(f"| {r.model} | {r.precision} | {r.published_ms:.3f} ({r.runtime}) | {before[i]:.3f} | {predicted[fitted][i]:.3f} | "
              f"{held_out[i]:.3f} |")

    def summary(values: list[float]) -> str:
        errors = [abs(v / r.published_ms - 1) for v, r in zip(values, rows)]
        return f"median |error| {statistics.median(errors):.0%}, worst {max(errors):.0%}"

    print(f"\n{len(rows)} rows, {len(models)} models. Target's figures: {summary(before)}. Fit (all rows): "
          f"{summary(predicted[fitted])}. Held out (leave one model out): {summary(held_out)}.")
    print(f"fit: qnn_op_ns {fitted[0]}, qnn_hvx_op_ns {fitted[1]}, HMX rates x{fitted[2]}")
    if args.write:
        _write(target, fitted, len(rows), len(models), summary(held_out), args.published)
    return 0


def _write(target, fitted: tuple[float, float, float], rows: int, models: int, held_out: str, table: Path) -> None:
    from hexfuse.graph_passes.load.io import write_atomic

    path = Path(target.path)
    raw = json.loads(path.read_text(encoding="utf-8"))
    where = table.resolve().relative_to(ROOT) if table.resolve().is_relative_to(ROOT) else table.name
    source = (f"fit: {where} ({rows} rows, {models} models, {target.name}): replay of QNN's own schedules (HTP "
              f"simulator, optrace), grid least |log error|, held out (leave one model out) {held_out} "
              f"(tools/bench/fit_replay.py)")
    raw["qnn_op_ns"] = {"value": fitted[0], "source": source}
    raw["qnn_hvx_op_ns"] = {"value": fitted[1], "source": source}
    write_atomic(path, (json.dumps(raw, indent=1) + "\n").encode())
    print(f"fit_replay: wrote {path}", file=sys.stderr)




# --- issue 43: the size-scaled per-op constant, the DMA queue and the DDR floor, fitted on vision and LLM rows together
FLOOR_FRACTIONS = (1.0, 0.01, 0.003)
HALF_NS = (30.0, 60.0, 100.0, 200.0)
RATE_SCALES = (4.0, 6.0, 8.0)
SUSTAINED = tuple(round(0.4 + 0.05 * i, 2) for i in range(12))  # 0.4 .. 0.95
A16_FRACTIONS = (1.0, 0.5, 0.25)  # hmx_a16_rate_fraction: the LLM rows' (w4a16) HMX rate over the 8-bit rate
EXECUTE_NS = tuple(25e3 * i for i in range(9))  # graph_execute_ns 0 .. 200 us (0 is written as 1 ns: no 0 in a target)
VISION_MODELS = ("googlenet", "resnet50", "densenet121")  # tools/anchors/light.py (float: see docs/anchors.md)


@dataclass
class JointRow:
    kind: str  # vision | llm
    model: str
    label: str
    target: str
    published_ms: float
    schedule: object
    config: object = None
    precision: str = "w4a16"
    tokens: int = 1
    kv: int = 0
    floor_ms: float = 0.0  # LLM rows: bytes read once at peak DDR
    splits: int = 1  # graph executions per pass (an LLM's context binaries; a vision inference: one)


def execute_cap_ns(chipset: str, runtime: str = "onnx") -> float:
    """The most graph_execute_ns may be on ``chipset``: half its fastest published inference through the vision
    rows' runtime (ONNX Runtime's QNN EP: every model of tools/anchors/published.csv, each with work of its own
    besides the call)."""
    with (ROOT / "tools" / "anchors" / "published.csv").open(newline="", encoding="utf-8") as handle:
        fastest = min(float(r["milliseconds"]) for r in csv.DictReader(handle)
                      if r["chipset"] == chipset and r["runtime"] == runtime)
    return fastest * 1e6 / 2


def joint_rows(targets: list[str], vision_maps: Path, log=print, prepare: bool = True) -> list[JointRow]:
    from hexfuse.graph_passes.cost.target import load_target
    from hexfuse.graph_passes.engines.engine_map import load_engine_map
    from hexfuse.tools import llm_predict

    rows = []
    for t in targets:
        chipset = load_target(t).name
        for r in published_rows(ROOT / "tools" / "anchors" / "published.csv", chipset):
            path = vision_maps / f"{r.model}.{t}.json"
            if r.model in VISION_MODELS and r.precision == "float" and path.is_file():
                rows.append(JointRow("vision", r.model, f"{r.model} float", t, r.published_ms,
                                     load_engine_map(path).schedule))
    for r in llm_predict.published_rows():
        if r["chipset"] not in targets:
            continue
        config = llm_predict.config_for(r["model"])
        tokens, context = int(r["tokens"]), int(r["context"])
        kv = context - tokens
        try:
            schedule = llm_predict.layer_schedule(config, r["phase"], tokens, kv, r["precision"], r["chipset"], log, prepare)
        except Exception as exc:  # noqa: BLE001 (a layer the simulator cannot prepare is reported, not fatal)
            log(f"{r['model']} {r['phase']} {r['chipset']}: no schedule ({exc})")
            continue
        floor = llm_predict.floor_bytes(config, r["precision"], tokens, kv) / load_target(r["chipset"]).ddr_gbps / 1e6
        rows.append(JointRow("llm", r["model"], f"{r['model']} {r['phase']} {tokens} over {kv}", r["chipset"],
                             float(r["milliseconds"]), schedule, config, r["precision"], tokens, kv, floor,
                             int(r["splits"])))
    return rows


def joint_predict(row: JointRow, target, lists_ns: float) -> float:
    """ms: the replayed run lists (``lists_ns``, one layer for an LLM row) held to the DDR floor, plus the graph
    executions; for an LLM row the whole pass (tools/llm_predict.py: layers, LM head, embedding, executions)."""
    from hexfuse.graph_passes.cost.replay import ddr_floor_ns
    from hexfuse.tools import llm_predict

    one = max(lists_ns, ddr_floor_ns(row.schedule, target))
    if row.kind == "vision":
        return (one + target.graph_execute_ns) / 1e6
    return llm_predict.pass_ns(row.config, one, row.precision, row.tokens, row.splits, target) / 1e6


def fit_joint(rows: list[JointRow], grid_f=FLOOR_FRACTIONS, grid_h=HALF_NS, grid_s=SUSTAINED, grid_r=RATE_SCALES,
              grid_e=EXECUTE_NS, grid_a=A16_FRACTIONS, caps: dict[str, float] | None = None):
    """(f, h, r, a, {target: (s, e)}) with the least mean |log(predicted / published)| over ``rows`` (vision and LLM
    rows as two groups of equal weight): f, h (the per-op constant's floor share and half-way work), r (QNN's HVX
    streaming rate over the estimate) and a (HMX with 16-bit activations over the 8-bit rate: the LLM rows are
    w4a16, the vision rows float) shared by the targets (QNN's software, HMX's design), per target s (the sustained DDR
    share: the DMA queue's rate where below the DMA engine's, and the floor) and e (graph_execute_ns, at most
    ``caps[target]``: execute_cap_ns); and per row its prediction at the fit and held out (leave one model out: its
    rows on every target)."""
    from hexfuse.graph_passes.cost.replay import graph_of, op_costs, replay
    from hexfuse.graph_passes.cost.target import load_target
    from hexfuse.tools.llm_predict import priced_for

    bases = {t: load_target(t) for t in {r.target for r in rows}}
    caps = caps if caps is not None else {t: execute_cap_ns(b.name) for t, b in bases.items()}
    points = [(f, h, k) for k in grid_r for f, h in [(1.0, grid_h[0])] + [(f, h) for f in grid_f if f < 1.0 for h in grid_h]]
    shapes = [graph_of(r.schedule, op_costs(r.schedule, bases[r.target])) for r in rows]  # waits: the same at every point
    def target(i: int, f: float, h: float, k: float, a: float, s: float, e: float = 1.0):
        t = bases[rows[i].target].with_values(qnn_op_floor_fraction=f, qnn_op_half_ns=h, qnn_hvx_rate_scale=k,
                                              hmx_a16_rate_fraction=a, ddr_sustained_fraction=s, graph_execute_ns=e)
        return t if rows[i].kind == "vision" else priced_for(t, rows[i].precision)

    lists = {}
    for f, h, k in points:
        for a in grid_a:
            for s in grid_s:
                for i, r in enumerate(rows):
                    if r.kind == "vision" and a != grid_a[0]:  # float rows: no 16-bit activations on HMX
                        lists[(f, h, k, a, s, i)] = lists[(f, h, k, grid_a[0], s, i)]
                        continue
                    t = target(i, f, h, k, a, s)
                    costs = op_costs(r.schedule, t)
                    graph = replace(shapes[i], run=costs.run, transfer=costs.transfer, ddr_floor=costs.ddr_floor)
                    lists[(f, h, k, a, s, i)] = replay(graph, t.hvx_contexts).lists_ns

    def pred(i: int, f: float, h: float, k: float, a: float, se: tuple[float, float]) -> float:
        t = bases[rows[i].target].with_values(qnn_op_floor_fraction=f, qnn_op_half_ns=h, qnn_hvx_rate_scale=k,
                                              hmx_a16_rate_fraction=a, ddr_sustained_fraction=se[0],
                                              graph_execute_ns=se[1])
        return joint_predict(rows[i], t, lists[(f, h, k, a, se[0], i)])

    def best(keep: list[int]):
        # vision and LLM rows weigh alike as two groups (the fit is not the LLM rows' because they are more)
        kinds = {rows[i].kind for i in keep}
        count = {kind: sum(rows[i].kind == kind for i in keep) for kind in kinds}
        weight = {i: 1.0 / (len(kinds) * count[rows[i].kind]) for i in keep}
        choice = None
        for (f, h, k), a in itertools.product(points, grid_a):
            total, chosen = 0.0, {}
            for t in bases:
                mine = [i for i in keep if rows[i].target == t]
                options = [(s, e) for s in grid_s for e in grid_e if e <= caps[t]] if mine else [(1.0, grid_e[0])]
                errs = {se: sum(weight[i] * _error(pred(i, f, h, k, a, se), rows[i].published_ms) for i in mine)
                        for se in options}
                chosen[t] = min(errs, key=errs.get)
                total += errs[chosen[t]]
            if choice is None or total < choice[0] - 1e-12:
                choice = (total, f, h, k, a, chosen)
        return choice[1:]

    f, h, k, a, chosen = best(list(range(len(rows))))
    fitted = [pred(i, f, h, k, a, chosen[r.target]) for i, r in enumerate(rows)]
    held = [0.0] * len(rows)
    for model in sorted({r.model for r in rows}):
        hf, hh, hk, ha, hs = best([i for i, r in enumerate(rows) if r.model != model])
        for i, r in enumerate(rows):
            if r.model == model:
                held[i] = pred(i, hf, hh, hk, ha, hs[r.target])

    def as_targeted(i: int):  # the target's own constants, as a row of its kind is priced
        return bases[rows[i].target] if rows[i].kind == "vision" else priced_for(bases[rows[i].target], rows[i].precision)

    before = [joint_predict(r, bases[r.target], replay(graph_of(r.schedule, op_costs(r.schedule, as_targeted(i))),
                                                           bases[r.target].hvx_contexts).lists_ns) for i, r in enumerate(rows)]
    return (f, h, k, a, chosen), before, fitted, held


def render_joint(rows: list[JointRow], before, fitted, held) -> str:
    lines = ["| row | target | published ms | DDR floor ms | before (target's constants) | fit | held out | "
             "before / published | held out / published |", "|---|---|---|---|---|---|---|---|---|"]
    for r, b, f, h in zip(rows, before, fitted, held):
        floor = f"{r.floor_ms:.1f}" if r.kind == "llm" else "-"
        lines.append(f"| {r.label} | {r.target} | {r.published_ms:.3f} | {floor} | {b:.3f} | {f:.3f} | {h:.3f} | "
                     f"{b / r.published_ms:.2f} | {h / r.published_ms:.2f} |")
    return "\n".join(lines)


def write_joint(fit, rows: list[JointRow], summary: str) -> None:
    from hexfuse.graph_passes.cost.target import load_target
    from hexfuse.graph_passes.load.io import write_atomic

    f, h, k, a, ss = fit
    n_llm = sum(r.kind == "llm" for r in rows)
    source = (f"fit: tools/anchors/llm_published.csv ({n_llm} rows) + tools/anchors/published.csv float rows of "
              f"{', '.join(VISION_MODELS)} ({len(rows) - n_llm} rows, tools/anchors/light.py graphs), sm8650 + sm8750 "
              f"together, grid least mean |log error|, held out (leave one model out): {summary} (tools/bench/fit_replay.py --joint)")
    for t, (s, e) in ss.items():
        path = Path(load_target(t).path)
        raw = json.loads(path.read_text(encoding="utf-8"))
        raw["qnn_op_floor_fraction"] = {"value": f, "source": source}
        raw["qnn_op_half_ns"] = {"value": h, "source": source}
        raw["qnn_hvx_rate_scale"] = {"value": k, "source": source}
        raw["hmx_a16_rate_fraction"] = {"value": a, "source": source}
        raw["ddr_sustained_fraction"] = {"value": s, "source": source}
        raw["graph_execute_ns"] = {"value": max(e, 1.0), "source": source}
        write_atomic(path, (json.dumps(raw, indent=1) + "\n").encode())


def main_joint(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tools/bench/fit_replay.py --joint")
    parser.add_argument("--joint", action="store_true")
    parser.add_argument("--targets", nargs="+", default=["sm8650", "sm8750"])
    parser.add_argument("--vision-maps", type=Path, default=Path.home() / ".cache" / "hexfuse" / "light_maps",
                        help="engine maps <model>.<target>.json of tools/anchors/light.py's graphs")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--cached-only", action="store_true", help="LLM rows whose layer schedule is cached only")
    args = parser.parse_args(argv)
    rows = joint_rows(args.targets, args.vision_maps, log=lambda text: print(text, file=sys.stderr, flush=True),
                      prepare=not args.cached_only)
    fit, before, fitted, held = fit_joint(rows)
    print(render_joint(rows, before, fitted, held))

    def summary(values, kind):
        ratios = [v / r.published_ms for v, r in zip(values, rows) if r.kind == kind]
        return f"{kind} median ratio {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}" if ratios else ""

    text = "; ".join(s for s in (summary(held, "llm"), summary(held, "vision")) if s)
    print(f"\nfit: qnn_op_floor_fraction {fit[0]}, qnn_op_half_ns {fit[1]}, qnn_hvx_rate_scale {fit[2]}, "
          f"hmx_a16_rate_fraction {fit[3]}, (ddr_sustained_fraction, graph_execute_ns) {fit[4]}")
    print(f"before: {summary(before, 'llm')}; {summary(before, 'vision')}")
    print(f"held out: {text}")
    if args.write:
        write_joint(fit, rows, text)
    return 0


if __name__ == "__main__":
    sys.exit(main_joint(sys.argv[1:]) if "--joint" in sys.argv[1:] else main())
