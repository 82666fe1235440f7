"""Predicted vs published latency of the anchor models, before and after the fit (tools/bench/bench_anchors.py).

    rows      published.csv, one per (model, chipset, precision) with an exported model in the cache
    before    the bundled target as it is (or as given)
    held out  each model predicted by a fit on the other folds' models (fit.held_out)
    fitted    one fit on every row of the chipset: the constants written to the target JSON

Errors are absolute relative errors |predicted / published - 1|; the table prints per chipset and
precision the median and the worst.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hexfuse.graph_passes.cost.target import Target
from hexfuse.graph_passes.cost import calibrate as fitting
from hexfuse.tools.anchors.published import Published

def model_path(cache: Path, model: str, precision: str) -> Path:
    return cache / fitting.MODEL_FILES[precision].format(model=model)


@dataclass
class Chipset:
    """Every row of one chipset with its predictions."""

    name: str
    base: Target
    rows: list[Published]
    cases: list[fitting.ModelCase]
    before_ns: list[float] = field(default_factory=list)
    held_out_ns: list[float] = field(default_factory=list)
    fitted_ns: list[float] = field(default_factory=list)
    result: fitting.LatencyFit | None = None

    @property
    def fit_rows(self) -> list[fitting.LatencyRow]:
        return [fitting.LatencyRow(c, r.milliseconds) for r, c in zip(self.rows, self.cases)]


def load_cases(rows: Iterable[Published], cache: Path, log=print) -> tuple[list[Published], list[fitting.ModelCase]]:
    """Rows whose model file exists, with their cases (analysed once per file)."""
    seen: dict[Path, fitting.ModelCase] = {}
    kept, cases = [], []
    for row in rows:
        path = model_path(cache, row.model, row.precision)
        if not path.is_file():
            log(f"  {row.model} {row.precision}: no {path.name} in {cache}; row skipped")
            continue
        if path not in seen:
            seen[path] = fitting.ModelCase.load(row.model, row.precision, path)
        kept.append(row)
        cases.append(seen[path])
    return kept, cases


def run_chipset(chip: Chipset, do_fit: bool, folds: int = fitting.LATENCY_FOLDS,
                iterations: int = fitting.LATENCY_ITERATIONS, caps: dict[str, float] | None = None) -> Chipset:
    chip.before_ns = [fitting.model_latency(c, chip.base).serial_ns for c in chip.cases]
    if not do_fit:
        return chip
    rows = chip.fit_rows
    models = fitting.latency_models(chip.base, chip.cases, caps=caps)
    held = fitting.held_out_latencies(rows, chip.base, folds, iterations, models)
    chip.held_out_ns = [held[i] for i in range(len(rows))]
    chip.result = fitting.fit_latencies(rows, chip.base, iterations, models)
    chip.fitted_ns = [chip.result.predict_ns(c) for c in chip.cases]
    return chip


def _stats(chip: Chipset, predicted: list[float], precision: str | None) -> str:
    pairs = [(p, r.milliseconds) for p, r in zip(predicted, chip.rows) if precision in (None, r.precision)]
    if not pairs or not predicted:
        return "-"
    median, worst = fitting.error_summary(fitting.latency_errors([p for p, _ in pairs], [m for _, m in pairs]))
    return f"{median:.0%} / {worst:.0%}"


def error_table(chips: list[Chipset]) -> str:
    """Markdown: median / worst abs relative error per chipset and precision, before and after."""
    head = "| chipset | precision | rows | before (bundled estimates, as analyze prices) | held out (k-fold fit) |"
    lines = [head + " in-sample (full fit) |", "|---|---|---|---|---|---|"]
    for chip in chips:
        for precision in ("float", "w8a8", None):
            n = sum(1 for r in chip.rows if precision in (None, r.precision))
            if not n:
                continue
            cells = [chip.name, precision or "all", str(n), _stats(chip, chip.before_ns, precision),
                     _stats(chip, chip.held_out_ns, precision)]
            cells += [_stats(chip, chip.fitted_ns, precision)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def row_table(chip: Chipset) -> str:
    head = "| model | precision | runtime | published ms | before ms | ratio | held-out ms | ratio |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for i, row in enumerate(chip.rows):
        before = chip.before_ns[i] / 1e6
        held = chip.held_out_ns[i] / 1e6 if chip.held_out_ns else float("nan")
        lines.append(f"| {row.model} | {row.precision} | {row.runtime} | {row.milliseconds:.3f} | {before:.3f} | "
                     f"{before / row.milliseconds:.2f} | {held:.3f} | {held / row.milliseconds:.2f} |")
    return "\n".join(lines)


def constants_table(chips: list[Chipset]) -> str:
    names = sorted({n for c in chips if c.result for n in c.result.values()}, key=_order)
    lines = ["| constant | " + " | ".join(c.name for c in chips) + " |", "|---|" + "---|" * len(chips)]
    for name in names:
        cells = []
        for chip in chips:
            if chip.result is None or name not in chip.result.values():
                cells.append("-")
                continue
            before, after = fitting.LatencyModel.value(chip.base, name), chip.result.values()[name]
            cells.append(f"{_fmt(before)} → {_fmt(after)} (x{after / before:.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _order(name: str) -> tuple[int, str]:
    return (fitting.LATENCY_SCALARS.index(name) if name in fitting.LATENCY_SCALARS else len(fitting.LATENCY_SCALARS), name)


def _fmt(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def fit_source(chip: Chipset, table: str) -> str:
    assert chip.result is not None
    models = len({r.model for r in chip.rows})
    precisions = "+".join(sorted({r.precision for r in chip.rows}))
    median, _ = fitting.error_summary(fitting.latency_errors(chip.held_out_ns, [r.milliseconds for r in chip.rows]))
    caps = next(iter(chip.result.model.caps.items()), None) if chip.result.model.caps else None
    capped = "" if caps is None else f"; {caps[0]} capped at {caps[1]:g} (the next generation's fitted value)"
    how = " with QDQ ports priced quantized (opcost.Storage reads the port's wire encoding)"
    return (f"fit: {table} ({len(chip.rows)} rows, {models} models, {precisions}, {chip.rows[0].device}), "
            f"least squares on log(predicted/published) of the whole-model serial latency{how} "
            f"(tools/bench/bench_anchors.py --fit{capped}); held-out median |error| {median:.0%} ({fitting.LATENCY_FOLDS}-fold over models)")


def write_target(chip: Chipset, path: Path, table: str) -> None:
    """Fitted values and their source into a target JSON; every other field (folds too) as it was."""
    assert chip.result is not None
    raw = json.loads(path.read_text(encoding="utf-8"))
    source = fit_source(chip, table)
    factors = raw.get("factors", {})
    for name, value in chip.result.values().items():
        if name.startswith("factors."):
            factors[name.split(".", 1)[1]] = {"value": round(value, 4), "source": source}
        else:
            integer = isinstance(raw.get(name, {}).get("value"), int) and name != "ddr_npu_fraction"
            raw[name] = {"value": int(round(value)) if integer else round(value, 4 if value < 10 else 1),
                         "source": source}
    if factors:
        raw["factors"] = dict(sorted(factors.items()))
    path.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def median_ratio(chip: Chipset, predicted: list[float]) -> float:
    return float(statistics.median(np.array(predicted) / (np.array([r.milliseconds for r in chip.rows]) * 1e6)))
