#!/usr/bin/env python3
"""Per target, the groups the cost model finds on the bundled models: predicted serial vs fused time,
and the candidates the margin rejected, by reason.

    python tools/bench/cost_table.py                       # every bundled target, light models + models/*.onnx
    python tools/bench/cost_table.py --summary              # one row per model and target
    python tools/bench/cost_table.py --target sm8650 --min-gain 0.15 models/gptj_block.onnx
    python tools/bench/cost_table.py --as-designed          # fused nodes priced as designed (--as-designed)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from hexfuse.graph_passes.cost import CostScorer, list_targets, load_target
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.select.balance import Verdict
from hexfuse import analyze_model
from hexfuse.graph_passes.spec.model import FusedOp

ROOT = Path(__file__).resolve().parents[2]
LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
LIGHT_MODELS = ("light_squeezenet", "light_inception_v1", "light_resnet50", "light_bvlc_alexnet")


@dataclass
class Recorder:
    """A Scorer that remembers every verdict (the pass only keeps the winners)."""

    inner: CostScorer
    seen: list[tuple[FusedOp, Verdict]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    def score(self, op: FusedOp) -> Verdict:
        verdict = self.inner.score(op)
        self.seen.append((op, verdict))
        return verdict


def _kind(reason: str) -> str:
    return reason.split(":")[0]


def _us(details: dict[str, float], key: str) -> str:
    return f"{details[key] / 1e3:.2f}" if key in details else "-"


def model_table(path: Path, target_name: str, min_gain: float, as_designed: bool = False) -> list[str]:
    recorder = Recorder(CostScorer(load_target(target_name), min_gain, as_designed=as_designed))
    result = analyze_model(path, scorer=recorder)
    lines = [(f"### {path.name} ({target_name}): {len(result.fused_ops)} fused groups, "
             f"{len(recorder.seen)} candidates scored"), ""]
    if result.fused_ops:
        lines += [("| group | tasks | t1 serial | t2 best existing | t3 fused serial | t4 fused concurrent | "
                  "entry merge | overlap | gain vs t2 |"), "|---|---|---|---|---|---|---|---|---|"]
        for node in result.fused_nodes:
            group, op = node.group, result.fused_ops[node.op]
            d = group.verdict.details
            tasks = " + ".join(f"{t.engine}({len(t.nodes)})" for t in op.tasks)
            lines.append(f"| {node.node_name} | {tasks} | {_us(d, 't1_serial')} | {_us(d, 't2_best_existing')} | "
                         f"{_us(d, 't3_fused_serial')} | {_us(d, 't4_fused_concurrent')} | "
                         f"{d['entry_merge_gain']:.1%} | {d['overlap_gain']:.1%} | {group.verdict.gain:.1%} |")
        lines.append("")
    rejected = [(op, v) for op, v in recorder.seen if not v.accepted]
    if rejected:
        kinds = Counter(_kind(v.reason) for _, v in rejected)
        lines += ["| rejected by the margin | candidates | example |", "|---|---|---|"]
        for kind, count in kinds.most_common():
            example = next(v.reason for _, v in rejected if _kind(v.reason) == kind)
            lines.append(f"| {kind} | {count} | {example} |")
        lines.append("")
    return lines


def summary_row(path: Path, target_name: str, min_gain: float, as_designed: bool = False) -> str:
    recorder = Recorder(CostScorer(load_target(target_name), min_gain, as_designed=as_designed))
    result = analyze_model(path, scorer=recorder)
    ds = [g.verdict.details for g in result.selection.groups]
    t1, t2, t4 = (sum(d[k] for d in ds) / 1e3 for k in ("t1_serial", "t2_best_existing", "t4_fused_concurrent"))
    merge = sum(d["entry_merge_gain"] * d["t1_serial"] for d in ds) / 1e3
    overlap = sum(d["overlap_gain"] * d["t1_serial"] for d in ds) / 1e3
    kinds = Counter(_kind(v.reason) for _, v in recorder.seen if not v.accepted)
    why = ", ".join(f"{k} {n}" for k, n in kinds.most_common()) or "-"
    return (f"| {path.name} | {len(recorder.seen)} | {len(ds)} | {t1:.1f} | {t2:.1f} | {t4:.1f} | "
            f"{merge:.1f} | {overlap:.1f} | {why} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="ONNX models (default: light models + models/*.onnx)")
    parser.add_argument("--target", action="append", help=f"target(s) (default: all of {', '.join(list_targets())})")
    parser.add_argument("--min-gain", type=float, default=0.1)
    parser.add_argument("--summary", action="store_true", help="one row per model: totals over its fused groups")
    parser.add_argument("--as-designed", action="store_true",
                        help="price fused nodes as designed, not as the generated package builds them")
    args = parser.parse_args(argv)
    models = [Path(m) for m in args.models] or (
        [LIGHT / f"{name}.onnx" for name in LIGHT_MODELS] + sorted((ROOT / "models").glob("*.onnx")))
    for target_name in args.target or list_targets():
        target = load_target(target_name)
        priced = "as designed" if args.as_designed else "as the package builds them"
        print(f"## target {target.name}: {target.description} (min gain {args.min_gain:.0%}; fused nodes priced "
              f"{priced})\n")
        if args.summary:
            print("| model | candidates scored | fused | sum t1 us | sum t2 us | sum t4 us | entry-merge saved us | "
                  "overlap saved us | rejected (reason: count) |\n|---|---|---|---|---|---|---|---|---|")
            for model in models:
                print(summary_row(model, target_name, args.min_gain, args.as_designed))
            print()
            continue
        for model in models:
            try:
                print("\n".join(model_table(model, target_name, args.min_gain, args.as_designed)))
            except HexfuseError as exc:
                print(f"### {model.name}: skipped: {exc}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
