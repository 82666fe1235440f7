"""Write report.json, report.md, trace.json and latency.png into the report directory, atomically."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from hexfuse.graph_passes.load.io import write_atomic

from . import timeline


def _json_default(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(type(x).__name__)


def write_all(out_dir: Path, rep: dict, timelines: dict, times: dict[str, np.ndarray]) -> None:
    trace = timeline.trace_events({k: tl for k, tl in timelines.items()})
    write_atomic(out_dir / "trace.json", json.dumps(trace).encode())
    write_plot(out_dir / "latency.png", times, rep)
    rep["files"] = ["report.json", "report.md", "trace.json", "latency.png"] + sorted(
        p["file"] for p in rep["profiles"].values()) + sorted(
        name for pics in rep.get("device_overlap", {}).get("pictures", {}).values() for name in pics.values())
    write_atomic(out_dir / "report.md", render_md(rep).encode())
    write_atomic(out_dir / "report.json", json.dumps(rep, indent=1, default=_json_default).encode())


def write_plot(path: Path, times: dict[str, np.ndarray], rep: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = list(times)
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(keys) + 2))
    major_minor = tuple(int(x) for x in matplotlib.__version__.split(".")[:2])
    horiz = {"orientation": "horizontal"} if major_minor >= (3, 10) else {"vert": False}
    ax.boxplot([times[k] for k in keys], showfliers=True, **horiz)
    ax.set_yticks(range(1, len(keys) + 1), keys)
    ax.set_xlabel("latency per run (ms)")
    title = f"hexfuse ab on {rep['ep']}"
    if rep["simulator"]:
        title += " (x86 HTP simulator: functional timing only)"
    ax.set_title(title)
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=100)
    plt.close(fig)
    write_atomic(path, image.getvalue())


def _f(x, nd: int = 3) -> str:
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def _g(x) -> str:
    """An error in significant digits: 4e-4 is not 0.000."""
    return "-" if x is None else f"{x:.3g}"


def render_md(r: dict) -> str:
    L = [f"# hexfuse A/B report ({r['ep']} EP)", "",
         f"- original: `{r['models']['original']}`", f"- fused: `{r['models']['fused']}` "
         f"({r['models']['fused_node_count']} fused nodes: {', '.join(r['models']['fused_op_types']) or 'none'})",
         f"- platform: {r['platform']['system']} {r['platform']['machine']}, onnxruntime {r['platform']['onnxruntime']}"
         + (f", onnxruntime-qnn {r['platform'].get('onnxruntime_qnn')}" if r["ep"] == "qnn" else ""),
         f"- inputs: {r['inputs']['source']}; {r['iters']} timed iterations after {r['warmup']} warmup, interleaved"]
    if r.get("imported"):
        imp = r["imported"]
        form = "context binaries prepared on x86" if imp["form"] == "context" else "ONNX models prepared on the device"
        L.append(f"- imported from `{imp['results']}` (run_ab.py of a bundle for {imp['target']['name']}; {form}); "
                 "session creation s: " + ", ".join(f"{k} {v:.3f}" for k, v in imp["session_seconds"].items()))
    if r["simulator"]:
        L.append("- **x86 HTP simulator**: outputs and node assignment are real; times and cycles are "
                 "functional only and say nothing about a device.")
    if r["qnn_preset"]:
        L.append(f"- QNN preset `{r['qnn_preset']['name']}`: `{r['qnn_preset']['provider_options']}`")
    if r.get("device_overlap"):  # an imported device run: the engine overlap leads
        from .device_overlap import markdown

        L += ["", *markdown(r["device_overlap"])]
    L += ["", "## Baselines", "", "| key | baseline | median ms | p90 ms | p99 ms | note |", "|---|---|---|---|---|---|"]
    for b in r["baselines"]:
        lat = b.get("latency") or {}
        L.append(f"| {b['key']} | {b['label']} | {_f(lat.get('median_ms'))} | {_f(lat.get('p90_ms'))} | "
                 f"{_f(lat.get('p99_ms'))} | {'' if b['available'] else b['reason']} |")
    L += ["", "## Speedups (paired, bootstrap 95% CI)", "",
          "| gain | reference -> candidate | speedup | 95% CI (within the run) | rounds (spread) | significant | note |",
          "|---|---|---|---|---|---|---|"]
    for name, s in r["speedups"].items():
        spread = s.get("round_spread")
        rounds = f"{len(s['rounds'])}: {spread[0]:.3f}-{spread[1]:.3f}" if spread else "-"
        significant = {True: "yes", False: "no"}.get(s.get("significant"), "-")
        if s.get("significant") is False and s.get("significant_within_run"):
            significant = "no (rounds disagree)" if s["rounds"] else "no (too few iterations for rounds)"
        L.append(f"| {name} | {s['reference']} -> {s['candidate']} | {s['speedup']:.3f}x | "
                 f"[{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}] | {rounds} | {significant} | {s.get('note', '')} |")
    if r.get("cycles"):
        L += ["", "## QNN cycles (profiling pass)", ""]
        for k, c in r["cycles"]["per_run"].items():
            L.append(f"- {k}: accelerator {_f(c['accelerator_cycles'], 0)} cycles, "
                     f"sum of per-node cycles {_f(c['serial_sum_cycles'], 0)}")
        for k, v in r["cycles"]["gains"].items():
            L.append(f"- {k}: {v:.3f}x")
    eq = r["equivalence"]
    L += ["", f"## Equivalence against {eq['against']}: {'PASS' if eq['passed'] else 'FAIL'}", "",
          "| run | output | max abs | max rel | cosine | pass |", "|---|---|---|---|---|---|"]
    for k, e in eq["runs"].items():
        for o in e["outputs"]:
            L.append(f"| {k} | {o['output']} | {_g(o.get('max_abs_err'))} | {_g(o.get('max_rel_err'))} | "
                     f"{_f(o.get('cosine'), 6)} | {o['passed']} |")
    L += ["", "## Node assignment", ""]
    for k, a in r["assignment"].items():
        L.append(f"- {k}: {a['nodes_per_ep']} in {a['n_subgraphs']} subgraph(s)")
    L += ["", "## Where engines idle (from the per-node profile)", "",
          "Engine classes: matrix = HMX work (MatMul/Gemm/Conv), vector = HVX work, dma = data movement. "
          "`idle while ready` = time an engine sat idle while an op of its class had all inputs ready "
          "and waited behind another op's boundary. `ideal span` = list schedule with one lane per "
          "engine (upper bound of overlap, ignores bandwidth contention).", "",
          "| run | unit | span | ideal span | bound | engine | ops | busy | idle % | idle while ready |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for k, tl in r["engines"].items():
        for eng, pe in tl["per_engine"].items():
            L.append(f"| {k} | {tl['unit']} | {_f(tl['span'], 1)} | {_f(tl['ideal_engine_parallel_span'], 1)} | "
                     f"{_f(tl['max_overlap_gain'], 2)}x | {eng} | {pe['ops']} | {_f(pe['busy'], 1)} | "
                     f"{100 * pe['idle_fraction']:.1f} | {_f(pe['idle_while_ready_work_waited'], 1)} |")
    L += ["", "Files: " + ", ".join(f"`{f}`" for f in r["files"]), ""]
    return "\n".join(L)
