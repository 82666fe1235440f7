"""Fit the replay's per-op constants to published phone latencies (issue 20 meets the schedule replay).

    python tools/fit_replay.py --published tools/anchors/published.csv --models DIR [--target sm8650]

For each published row of the target's chipset (model, precision, milliseconds), the model exported at
its published input shape (``DIR/<model>.onnx``, ``DIR/<model>_w8a8.onnx``: tools/bench_anchors.py writes
them) is prepared on the QNN EP's HTP simulator with optrace once (its engine map, cached beside this
run's output), and QNN's own schedule is replayed (graph_passes/cost/replay.py) over a grid of the
figures a schedule cannot tell: ``qnn_op_ns`` (each main-thread op's own time) and ``qnn_hvx_op_ns``
(each HVX-list op's launch and wait); ``--hmx-scales`` also tries scales of the target's HMX rates
(printed, never written). The grid point with the least mean
|log(replayed / published)| is the fit; held-out errors come from leaving each model out in turn.
Prints before (the target's figures) and after, and with ``--write`` stores the fit in the target file.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
              f"(tools/fit_replay.py)")
    raw["qnn_op_ns"] = {"value": fitted[0], "source": source}
    raw["qnn_hvx_op_ns"] = {"value": fitted[1], "source": source}
    write_atomic(path, (json.dumps(raw, indent=1) + "\n").encode())
    print(f"fit_replay: wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
