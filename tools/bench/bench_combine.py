"""Does combining requests pay at real size? Requests of one model (a prefill and decodes, real dimensions
from tools/realsize.py), three forms of the same work, measured side by side:

    (a) apart     each request its own graph, run one after the other
    (b) merged    ``hexfuse merge``: one graph, the requests still reading every weight each
    (c) combined  ``hexfuse combine``: the requests' row-wise chains run once on all their rows

    requests ── build (cached) ── merge ── combine (--requantize where quantized) ── verify (ORT CPU)
                                     │           │
                                     └───────────┴── ORT CPU latency, interleaved as hexfuse ab times
                                                 └── --targets: hexfuse engines (HTP simulator) per form,
                                                     QNN's schedule replayed (t2) and its DMA bytes

ONNX Runtime's CPU EP is real hardware (this machine), not a model of a phone: it says whether reading the
weights once pays where reading weights bounds the run. The replay is the cost model's word for the phone
(see the issue on LLM fidelity for how far to trust its decode figures).

    python -m hexfuse.tools.bench.bench_combine llama-3.2-1b --prefill 128 --decodes 512            # float, CPU
    python -m hexfuse.tools.bench.bench_combine llama-3.2-1b --prefill 128 --decodes 512 512 --precision w8a8 \\
        --iters 0 --targets sm8650 sm8750 --json out.json                                   # replay only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.realsize import CONFIGS, PRECISIONS, Layer, build, cache_dir, example_inputs

FORMS = ("apart", "merged", "combined")


@dataclass
class Measured:
    label: str
    requests: list[str]
    precision: str
    cpu_ms: dict[str, float] = field(default_factory=dict)  # form -> median of its iterations
    cpu_speedup: dict[str, dict] = field(default_factory=dict)  # "combined_vs_merged"/"_apart" -> paired_speedup
    weight_mb: dict[str, float] = field(default_factory=dict)  # form -> weight bytes the graph reads (MB)
    verification: list[dict] = field(default_factory=list)
    requantized: int = 0
    replay_us: dict[str, dict[str, float]] = field(default_factory=dict)  # target -> form -> t2
    dma_mb: dict[str, dict[str, float]] = field(default_factory=dict)  # target -> form -> DMA bytes in the schedule
    notes: list[str] = field(default_factory=list)


def _layers(config: str, prefill: int | None, decodes: list[int], precision: str) -> list[tuple[str, Layer]]:
    if config not in CONFIGS:
        raise HexfuseError(f"unknown config {config!r}; one of {sorted(CONFIGS)}")
    layers = [("prefill", Layer(CONFIGS[config], "prefill", prefill, precision))] if prefill else []
    layers += [(f"decode{i}", Layer(CONFIGS[config], "decode", kv, precision)) for i, kv in enumerate(decodes)]
    if len(layers) < 2:
        raise HexfuseError("give two or more requests (a prefill and decodes, or several decodes)")
    return layers


def _write(path: Path, model: onnx.ModelProto) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(model.SerializeToString())
    tmp.replace(path)
    return path


def _session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _feeds(session, own: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {i.name: own[i.name] for i in session.get_inputs()}


def cpu_latency(forms: dict[str, list[tuple[Path, dict]]], iters: int, threads: int) -> tuple[dict, dict]:
    """Each form's median (ms) and the paired speedups of combined over merged and over apart, timed as
    ``hexfuse ab`` times (tools/ab/latency.py: forms interleaved per iteration, rotating which goes first;
    speedup CI by bootstrap; per-round speedups and their spread). A form of several graphs (apart) runs
    them one after the other, each on its own inputs."""
    from hexfuse.tools.ab.latency import Progress, paired_speedup, time_interleaved

    sessions = {form: [(_session(path, threads), feeds) for path, feeds in group] for form, group in forms.items()}

    def runner(group):
        return lambda: [session.run(None, _feeds(session, feeds)) for session, feeds in group]

    times = time_interleaved({form: runner(group) for form, group in sessions.items()}, iters, warmup=2,
                             progress=Progress(quiet=False, every=30.0))
    medians = {form: round(float(np.median(t)), 2) for form, t in times.items()}
    speedups = {f"combined_vs_{other}": paired_speedup(times[other], times["combined"], seed=0)
                for other in ("merged", "apart")}
    return medians, speedups


def _replay(path: Path, target: str, log_dir: Path, timeout_s: float) -> tuple[float | None, float | None, str]:
    """(t2 us, DMA MB, failure note) of QNN's schedule of ``path`` on ``target`` (prepared when not cached)."""
    from hexfuse.graph_passes.combine.schedule import replayed
    from hexfuse.graph_passes.cost.target import load_target
    from hexfuse.graph_passes.load.io import file_sha256
    from hexfuse.tools.bench.bench_realsize import prepare

    _, failure = prepare(path, target, timeout_s, log_dir)
    if failure:
        return None, None, failure
    found = replayed(path, file_sha256(path), load_target(target))
    if found is None:
        return None, None, "hexfuse engines wrote no schedule"
    return found.latency_us, found.dma_mb, ""


def bench(config: str, prefill: int | None, decodes: list[int], precision: str, iters: int, threads: int,
          targets: list[str], timeout_s: float) -> Measured:
    from hexfuse.graph_passes.combine.run import combine_requests
    from hexfuse.graph_passes.merge.requests import merge_requests

    layers = _layers(config, prefill, decodes, precision)
    names = [name for name, _ in layers]
    label = f"{config} " + " + ".join(f"{'prefill' if l.mode == 'prefill' else 'decode@KV'}{l.size}" for _, l in layers)
    say = lambda text: print(f"bench_combine: {label} {precision}: {text}", file=sys.stderr, flush=True)  # noqa: E731
    say("building the requests (cached)")
    paths = [build(layer) for _, layer in layers]
    folder = cache_dir() / "combine"
    folder.mkdir(parents=True, exist_ok=True)
    stem = "+".join(p.name[:-len(".onnx")] for p in paths)  # the layers' stems and cache keys
    if len(stem) > 150:  # file names stop at 255 bytes
        stem = f"{layers[0][1].stem}+{len(paths) - 1}.{hashlib.sha256(stem.encode()).hexdigest()[:16]}"
    merged_path = folder / f"{stem}.merged.onnx"
    if not merged_path.is_file():
        say("merging")
        _write(merged_path, merge_requests(paths, names).model)
    say("combining and verifying")
    result = combine_requests(merged_path, requantized=precision != "float")
    combined_path = _write(folder / f"{stem}.combined.onnx", result.model)
    reference_path = _write(folder / f"{stem}.reference.onnx", result.reference) if result.requantized \
        else merged_path
    measured = Measured(label, names, precision, requantized=len(result.requantized))
    apart_bytes = sum(result.prices[i].weight_bytes_apart for i in result.chosen)
    once_bytes = sum(result.prices[i].weight_bytes_combined for i in result.chosen)
    measured.weight_mb = {"merged": round(apart_bytes / 1e6, 2), "combined": round(once_bytes / 1e6, 2)}
    measured.verification = [{"request": c.request, "outputs": c.outputs, "bit_exact": c.exact,
                              "max_rel": c.max_rel, "max_steps": c.max_steps, "within": c.within,
                              "independent": c.independent}
                             for c in result.verification.checks]
    own = {name: example_inputs(layer, 7 + i) for i, (name, layer) in enumerate(layers)}
    joint = {f"{name}/{k}": v for name, values in own.items() for k, v in values.items()}
    if iters:
        say(f"ONNX Runtime CPU, {iters} iterations interleaved, {threads} thread(s)")
        forms = {"apart": [(path, own[name]) for path, name in zip(paths, names)],
                 "merged": [(reference_path, joint)], "combined": [(combined_path, joint)]}
        measured.cpu_ms, measured.cpu_speedup = cpu_latency(forms, iters, threads)
    for target in targets:
        say(f"QNN schedules on {target} (HTP simulator; cached once prepared)")
        measured.replay_us[target], measured.dma_mb[target] = {}, {}
        forms_paths = {"merged": reference_path, "combined": combined_path}
        for form, path in forms_paths.items():
            t2, dma, note = _replay(path, target, folder, timeout_s)
            if note:
                measured.notes.append(f"{form} on {target}: {note}")
            measured.replay_us[target][form], measured.dma_mb[target][form] = t2, dma
        parts = [_replay(p, target, folder, timeout_s) for p in paths]
        if all(t2 is not None for t2, _, _ in parts):
            measured.replay_us[target]["apart"] = round(sum(t2 for t2, _, _ in parts), 1)
            measured.dma_mb[target]["apart"] = round(sum(d for _, d, _ in parts), 2)
        else:
            measured.notes += [f"apart on {target}: {note}" for _, _, note in parts if note]
    return measured


def render(rows: list[Measured]) -> str:
    lines = ["| requests | precision | CPU ms apart / merged / combined | combined vs merged: speedup [CI], rounds | "
             "weights read MB merged -> combined | verification | replay t2 us apart / merged / combined | "
             "DMA MB apart / merged / combined |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cpu = " / ".join(f"{r.cpu_ms[f]:.1f}" for f in FORMS if f in r.cpu_ms) or "-"
        s = r.cpu_speedup.get("combined_vs_merged")
        speedup = (f"{s['speedup']:.2f}x [{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}], "
                   f"{min(s['rounds']):.2f}-{max(s['rounds']):.2f}" if s and s["rounds"] else "-")
        checks = ", ".join(f"{v['request']} {v['bit_exact']}/{v['outputs']} exact" for v in r.verification)
        replay = "; ".join(f"{t}: " + " / ".join(_f(v.get(f)) for f in FORMS) for t, v in r.replay_us.items()) or "-"
        dma = "; ".join(f"{t}: " + " / ".join(_f(v.get(f)) for f in FORMS) for t, v in r.dma_mb.items()) or "-"
        lines.append(f"| {r.label} | {r.precision}{' (requantized)' if r.requantized else ''} | {cpu} | {speedup} | "
                     f"{r.weight_mb['merged']:.1f} -> {r.weight_mb['combined']:.1f} | {checks} | {replay} | {dma} |")
    return "\n".join(lines)


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hexfuse.tools.bench.bench_combine", description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help=f"one of {sorted(CONFIGS)}")
    ap.add_argument("--prefill", type=int, default=None, help="prompt tokens of the prefill request (none: decodes only)")
    ap.add_argument("--decodes", type=int, nargs="+", default=[], help="KV length of each decode request")
    ap.add_argument("--precision", default="float", choices=PRECISIONS)
    ap.add_argument("--iters", type=int, default=25, help="CPU iterations, each running every form (0: no CPU timing)")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    ap.add_argument("--targets", nargs="*", default=[], help="replay QNN's schedule on these targets (HTP simulator)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per simulator preparation")
    ap.add_argument("--json", help="append the row to this JSON file")
    args = ap.parse_args(argv)
    try:
        row = bench(args.config, args.prefill, args.decodes, args.precision, args.iters, args.threads,
                    args.targets, args.timeout)
    except HexfuseError as exc:
        print(f"hexfuse: error: {exc}", file=sys.stderr)
        return 1
    print(render([row]))
    for note in row.notes:
        print(f"note: {note}")
    if args.json:
        path = Path(args.json)
        rows = json.loads(path.read_text()) if path.is_file() else []
        rows.append(asdict(row))
        path.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
