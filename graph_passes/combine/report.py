"""The report of ``hexfuse combine``: Markdown for people, JSON for tools; the same facts in both.

Every node kept per request appears in the "Kept per request" table, grouped by op type and reason
with a count and up to three examples: no row is dropped.
"""

from __future__ import annotations

import json
from collections import Counter

from hexfuse.graph_passes.combine.explain import explain
from hexfuse.graph_passes.combine.run import Combined
from hexfuse.graph_passes.combine.verify import RELATIVE_BOUND, STEP_BOUND

EXAMPLES = 3


def _ops(result: Combined, index: int) -> Counter:
    plan = result.plan
    return Counter(plan.view.nodes[plan.counterparts.tuples[t][0]].op_type for t in plan.chains[index].tuples)


def _kept(result: Combined) -> list[tuple[str, str, int, list[str]]]:
    """(op type, reason, count, example node names), most frequent first."""
    view = result.plan.view
    groups: dict[tuple[str, str], list[str]] = {}
    for node, reason in sorted(explain(result.plan).items()):
        groups.setdefault((view.nodes[node].op_type, reason), []).append(view.nodes[node].name or f"#{node}")
    for index, reason in sorted(result.refused.items()):
        for number in result.plan.chains[index].tuples:
            for member in result.plan.counterparts.tuples[number]:
                groups.setdefault((view.nodes[member].op_type, f"chain {index} not combined: {reason}"), []).append(
                    view.nodes[member].name or f"#{member}")
    rows = [(op, reason, len(names), names[:EXAMPLES]) for (op, reason), names in groups.items()]
    return sorted(rows, key=lambda row: (-row[2], row[0], row[1]))


def to_json(result: Combined) -> dict:
    plan, view = result.plan, result.plan.view
    chains = []
    for index, (chain, priced) in enumerate(zip(plan.chains, result.prices)):
        chains.append({
            "chain": index, "combined": index in result.chosen, "why_not": result.refused.get(index),
            "ops": dict(sorted(_ops(result, index).items())), "entries": len(chain.entries), "exits": len(chain.exits),
            "weights": len(chain.weights), "rows": list(priced.rows), "hmx_rows": list(priced.padded_rows),
            "weight_bytes_apart": priced.weight_bytes_apart, "weight_bytes_combined": priced.weight_bytes_combined,
            "estimated_apart_us": round(priced.apart_ns / 1e3, 3),
            "estimated_combined_us": round(priced.combined_ns / 1e3, 3), "added_ops": priced.added_ops,
        })
    verification = None if result.verification is None else [
        {"request": c.request, "outputs": c.outputs, "bit_exact": c.exact, "max_relative_difference": c.max_rel,
         "max_quantization_steps": c.max_steps, "within_bound": c.within,
         "independent_of_other_requests": c.independent} for c in result.verification.checks]
    return {
        "model": result.loaded.path.name, "target": result.target.name, "requests": view.names,
        "priced": "estimated (target figures; no QNN schedule)",
        "gain_kind": "work reduction: weights read once, one launch instead of one per request (not overlap)",
        "chains": chains,
        "kept_per_request": [{"op": op, "reason": reason, "count": count, "examples": examples}
                             for op, reason, count, examples in _kept(result)],
        "requantized": [{"tensor": r.tensor, "before": [list(e) for e in r.before], "after": list(r.after),
                         "steps_coarser": [round(c, 4) for c in r.coarser]} for r in result.requantized],
        "requantize_change": None if result.requantize_change is None else
        {c.request: c.max_rel for c in result.requantize_change.checks},
        "verification": verification,
        "qnn_schedule_replayed": {form: (None if r is None else {"t2_us": r.latency_us, "dma_mb": r.dma_mb})
                                  for form, r in sorted(result.replays.items())},
    }


def _bytes(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def to_markdown(result: Combined) -> str:
    plan, view = result.plan, result.plan.view
    counts = Counter(r for r in view.request_of if r >= 0)
    lines = [f"# hexfuse combine: {result.loaded.path.name}", "",
             f"Requests: {', '.join(f'{name} ({counts[i]} nodes)' for i, name in enumerate(view.names))}. "
             f"Target {result.target.name}, priced with its figures (estimated: no QNN schedule). "
             "The gain is **work reduction** (each weight read once for all requests, one launch instead of one "
             "per request), not engine overlap.", ""]
    apart = sum(result.prices[i].apart_ns for i in result.chosen)
    combined = sum(result.prices[i].combined_ns for i in result.chosen)
    moved = [sum(result.prices[i].weight_bytes_apart for i in result.chosen),
             sum(result.prices[i].weight_bytes_combined for i in result.chosen)]
    if result.chosen:
        lines += [f"Combined {len(result.chosen)} of {len(plan.chains)} chains: weights read {_bytes(moved[0])} -> "
                  f"{_bytes(moved[1])}; estimated {apart / 1e3:.1f} -> {combined / 1e3:.1f} us for those ops.", ""]
    else:
        lines += [f"Nothing combined ({len(plan.chains)} candidate chains; reasons below).", ""]
    lines += _replay_lines(result)
    lines += ["## Chains", "", "| chain | combined | ops | rows per request | HMX rows apart / combined | weights read "
              "apart -> combined | est. apart us | est. combined us | why not |", "|---|---|---|---|---|---|---|---|---|"]
    for index, priced in enumerate(result.prices):
        ops = ", ".join(f"{n} {op}" for op, n in _ops(result, index).most_common())
        lines.append(f"| {index} | {'yes' if index in result.chosen else 'no'} | {ops} | "
                     f"{' + '.join(map(str, priced.rows)) or '-'} | {priced.padded_rows[0]} / {priced.padded_rows[1]} | "
                     f"{_bytes(priced.weight_bytes_apart)} -> {_bytes(priced.weight_bytes_combined)} | "
                     f"{priced.apart_ns / 1e3:.1f} | {priced.combined_ns / 1e3:.1f} | {result.refused.get(index, '')} |")
    if result.verification is not None:
        lines += ["", "## Verification (ONNX Runtime CPU EP, seeded inputs)", "",
                  f"Bound: {RELATIVE_BOUND:g} of an output's largest value, or {STEP_BOUND} quantization steps of an "
                  "output a DequantizeLinear gives (ONNX Runtime's MatMul may round a row differently among other rows).",
                  "", "| request | outputs | bit-exact | max difference (relative) | max difference (steps) | "
                  "independent of other requests |", "|---|---|---|---|---|---|"]
        lines += [f"| {c.request} | {c.outputs} | {c.exact} | {c.max_rel:.3g} | "
                  f"{'-' if c.max_steps is None else f'{c.max_steps:.3g}'} | {'yes' if c.independent else 'NO'} |"
                  for c in result.verification.checks]
    if result.requantized:
        lines += ["", f"## Requantized ({len(result.requantized)} tensors: one encoding covering every request's range)", "",
                  "| tensor | before (scale/zero per request) | after | steps coarser |", "|---|---|---|---|"]
        lines += [f"| {r.tensor} | {'; '.join(f'{s:.4g}/{z}' for s, z in r.before)} | {r.after[0]:.4g}/{r.after[1]} | "
                  f"{', '.join(f'{c:.2f}x' for c in r.coarser)} |" for r in result.requantized]
        if result.requantize_change is not None:
            lines += ["", "What the shared encodings change (requantized merged model against the merged model): " +
                      ", ".join(f"{c.request} {c.max_rel:.3g}" for c in result.requantize_change.checks) +
                      " of each output's largest value; the combined model equals the requantized one within the bound."]
    kept = _kept(result)
    lines += ["", f"## Kept per request ({sum(row[2] for row in kept)} nodes)", "",
              "| op | nodes | why | examples |", "|---|---|---|---|"]
    lines += [f"| {op} | {count} | {reason} | {', '.join(f'`{e}`' for e in examples)} |"
              for op, reason, count, examples in kept]
    return "\n".join(lines) + "\n"


def _replay_lines(result: Combined) -> list[str]:
    merged, combined = result.replays.get("merged"), result.replays.get("combined")
    if merged is None or combined is None:
        missing = " and ".join(form for form in ("merged", "combined") if result.replays.get(form) is None)
        return [f"QNN's schedule on {result.target.name}: none cached for the {missing} model (`hexfuse engines MODEL "
                f"--target {result.target.name}` on the input and on this output, then `hexfuse combine` again, "
                "reports both forms replayed).", ""]
    return [f"QNN's schedule on {result.target.name}, replayed: merged {merged.latency_us:.1f} us with {merged.dma_mb:.1f} MB "
            f"moved by DMA; combined {combined.latency_us:.1f} us with {combined.dma_mb:.1f} MB. Reported, not obeyed: "
            "the replay's decode figures are 2-10x off published ones until its LLM calibration lands.", ""]


def to_json_text(result: Combined) -> str:
    return json.dumps(to_json(result), indent=1, sort_keys=True) + "\n"
