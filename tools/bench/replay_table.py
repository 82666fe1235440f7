"""Every group the estimated cost model would fuse, judged by the replay of QNN's own schedule.

    python tools/bench/replay_table.py [MODEL.onnx ...] [--target sm8650]

For each model with an engine map that holds QNN's schedule (the bundled ones by default), the pass runs
with the estimates deciding, the fused node priced as designed (every fusable group: --allow-scalar,
--allow-merge-only, --min-gain 0, --as-designed; priced as the package builds it, none would be), then
each group it picks is replayed (graph_passes/cost/schedule_verdict.py). Prints the replayed original,
per group the vector work that overlap could hide, what holding the group together adds, t4 against t2
and the verdict, and how much of the replay rests on the estimated per-op constants.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ("googlenet", "googlenet_qdq", "gptj_block", "gptj_block_qdq", "llama_prefill_decode_qdq")


def rows(model: Path, target: str) -> tuple[dict, list[dict]]:
    from hexfuse import analyze_model
    from hexfuse.graph_passes.cost.cli import scorer_for
    from hexfuse.graph_passes.cost.replay import Unholdable, fuse_group, replay
    from hexfuse.graph_passes.cost.schedule_verdict import ScheduleJudge, group_of
    from hexfuse.graph_passes.spec.builder import fused_op_spec

    scorer = scorer_for(target, 0.0, allow_merge_only=True, model=model, use_schedule=False, as_designed=True)
    if scorer.engines is None or scorer.engines.schedule is None:
        raise SystemExit(f"{model}: no engine map with QNN's schedule for {target} (`hexfuse engines {model} --target {target}`)")
    judge = ScheduleJudge(scorer.engines.schedule, scorer.target, 0.1)
    counts = scorer.engines.schedule.counts()
    head = {"model": model.stem, "t2_us": judge.original.latency_ns / 1e3, "ops": counts["ops"], "hmx": counts["hmx"],
            "hvx": counts["vec"], "beside": counts["hvx_beside_hmx"], "estimated_share": judge.estimated_share}
    result = analyze_model(model, scorer, allow_scalar=True)
    out = []
    for node in result.fused_nodes:
        op = fused_op_spec(result.analysis, node.group.tasks)
        verdict = judge.verdict(op)
        d = verdict.details
        added = t4 = float("nan")
        held = True
        try:  # the fused form replayed whatever stopped the verdict before it
            fused = fuse_group(judge.schedule, judge.costs, judge.target, group_of(op), (judge.base, judge.original))
            if fused is not None:
                added, t4 = fused.added_ns / 1e3, replay(fused.graph, judge.target.hvx_contexts).latency_ns / 1e3
        except Unholdable:
            held = False
        out.append({"group": node.node_name, "estimated_gain": node.group.verdict.gain, "accepted": verdict.accepted,
                    "vector_ops": int(d.get("schedule.vector_ops", 0)), "beside": int(d.get("schedule.beside_hmx", 0)),
                    "task_us": d.get("schedule.work_ns", float("nan")) / 1e3, "added_us": added, "t4_us": t4,
                    "held": held, "reason": verdict.reason})
    return head, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--target", default="sm8650")
    args = parser.parse_args(argv)
    models = args.models or [ROOT / "models" / f"{name}.onnx" for name in BUNDLED]
    summary: list[tuple[str, int, int, list[float]]] = []
    print("| model | QNN ops (HMX / HVX list) | HVX ops beside HMX | replayed t2 us | on per-op constants | group | "
          "estimated gain | vector work us | added us | t4 us | t4/t2 | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in models:
        head, groups = rows(model, args.target)
        lead = (f"| {head['model']} | {head['ops']} ({head['hmx']} / {head['hvx']}) | {head['beside']} | {head['t2_us']:.1f} | "
                f"{head['estimated_share']:.0%} ")
        ratios = [g["t4_us"] / head["t2_us"] for g in groups if g["t4_us"] == g["t4_us"]]
        summary.append((head["model"], len(groups), sum(g["accepted"] for g in groups), ratios))
        if not groups:
            print(lead + "| (the estimates fuse nothing) | | | | | | |")
        for g in groups:
            ratio = g["t4_us"] / head["t2_us"] if g["t4_us"] == g["t4_us"] else float("nan")
            why = g["reason"].split(":")[0] if not g["accepted"] else "fused"
            if not g["held"]:
                why += " (and cannot be held together)"
            print(lead + f"| `{g['group']}` | {g['estimated_gain']:.0%} | {g['task_us']:.2f} | {g['added_us']:.2f} | "
                         f"{g['t4_us']:.1f} | {ratio:.3f} | {why} |")
            lead = "| | | | | "
    print()
    for name, picked, accepted, ratios in summary:
        spread = f"fused/original {min(ratios):.3f}-{max(ratios):.3f} where it can be held together" if ratios else ""
        print(f"{name}: the estimates pick {picked} groups, the replay accepts {accepted}; {len(ratios)} can be held "
              f"together; {spread}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
