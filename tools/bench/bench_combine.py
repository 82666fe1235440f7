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

The requests are layers in the deployed form (tools/realsize_deployed.py: attention per head, or grouped over the
KV heads at decode while the cache fits; K cache stored transposed; 8-bit KV in; only the new token's K/V out);
``--legacy`` builds the old form (tools/realsize.py ``Layer``). A deployed prefill reads ``--past`` cached tokens
(default: what a deployed graph of context 4096 reads, 4096 - prefill; ``--past 0`` a prompt with nothing cached).

ONNX Runtime's CPU EP is real hardware (this machine), not a model of a phone: it says whether reading the
weights once pays where reading weights bounds the run. The replay is the cost model's word for the phone
(see the issue on LLM fidelity for how far to trust its decode figures).

    python -m hexfuse.tools.bench.bench_combine llama-3.2-1b --decodes 4095 4095 --iters 5      # float, CPU
    python -m hexfuse.tools.bench.bench_combine llama-3.2-1b --prefill 128 --decodes 4095 --precision w4a16 \\
        --iters 0 --targets sm8750 --json out.json                                          # replay only
    python -m hexfuse.tools.bench.bench_combine llama-3.2-1b --prefill 128 --decodes 512 --legacy   # the old form
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.realsize import CONFIGS, PRECISIONS, Config, Layer, build, cache_dir, config_of, example_inputs
from hexfuse.tools.realsize_deployed import ATTENTION, DeployedLayer

if TYPE_CHECKING:  # (the combine package is imported where it runs)
    from hexfuse.graph_passes.combine.schedule import Replayed

FORMS = ("apart", "merged", "combined")
CONTEXT = 4096  # the deployed graphs' static context (as tools/llm_predict.py): a prompt of T reads CONTEXT - T cached


@dataclass
class Measured:
    label: str
    requests: list[str]
    precision: str
    form: str = "deployed"  # the layers' form: deployed (realsize_deployed.DeployedLayer) or legacy (realsize.Layer)
    past: int = 0  # cached tokens the prefill reads (deployed form)
    cpu_ms: dict[str, float] = field(default_factory=dict)  # form -> median of its iterations
    cpu_speedup: dict[str, dict] = field(default_factory=dict)  # "combined_vs_merged"/"_apart" -> paired_speedup
    weight_mb: dict[str, float] = field(default_factory=dict)  # form -> bytes of the weights its matrix ops read (MB)
    verification: list[dict] = field(default_factory=list)
    requantized: int = 0
    requantize_change: dict[str, float] = field(default_factory=dict)  # request -> how far --requantize moved its
    # outputs from the merged model's (float: of their largest value; integer outputs: elements that differ)
    replay_us: dict[str, dict[str, float]] = field(default_factory=dict)  # target -> form -> t2
    dma_mb: dict[str, dict[str, float]] = field(default_factory=dict)  # target -> form -> DMA bytes in the schedule
    dma_parts_mb: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # target -> form -> kind -> MB
    kept_matrix: list[dict] = field(default_factory=list)  # matrix ops kept per request: op, reason, count, examples
    notes: list[str] = field(default_factory=list)


def default_past(prefill: int | None) -> int:
    """What a deployed prompt pass of ``prefill`` tokens reads from the cache: the rest of the context."""
    return max(CONTEXT - prefill, 0) if prefill else 0


def _layers(config: Config, prefill: int | None, decodes: list[int], precision: str, legacy: bool = False,
            past: int = 0, attention: str = "auto") -> list[tuple[str, Layer | DeployedLayer]]:
    if legacy and (past or attention != "auto"):
        raise HexfuseError("--past and --attention are for the deployed form (drop --legacy)")
    if legacy:
        make = lambda mode, size: Layer(config, mode, size, precision)  # noqa: E731
        layers = [("prefill", make("prefill", prefill))] if prefill else []
    else:
        make = lambda mode, size: DeployedLayer(config, mode, size, precision, attention=attention)  # noqa: E731
        layers = [("prefill", DeployedLayer(config, "prefill", prefill, precision, past=past))] if prefill else []
    layers += [(f"decode{i}", make("decode", kv)) for i, kv in enumerate(decodes)]
    if len(layers) < 2:
        raise HexfuseError("give two or more requests (a prefill and decodes, or several decodes)")
    return layers


def _label(config: Config, layers: list[tuple[str, Layer | DeployedLayer]]) -> str:
    def one(layer) -> str:
        if layer.mode == "decode":
            return f"decode@KV{layer.size}"
        return f"prefill{layer.size}" + (f"@KV{layer.past}" if getattr(layer, "past", 0) else "")
    return f"{config.name} " + " + ".join(one(layer) for _, layer in layers)


def own_inputs(path: Path, layer: Layer | DeployedLayer, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs of one request in the types its built graph takes: the deployed form's causal mask, and
    its 8-bit KV ports as random uint8 codes (quantized layers take uint8 where the float form takes floats)."""
    values = layer.feeds(seed) if isinstance(layer, DeployedLayer) else example_inputs(layer, seed)
    rng = np.random.default_rng(seed)
    for info in onnx.load(str(path), load_external_data=False).graph.input:
        if info.type.tensor_type.elem_type == onnx.TensorProto.UINT8 and info.name in values:
            values[info.name] = rng.integers(0, 256, values[info.name].shape, dtype=np.uint8)
    return values


def kept_matrix_ops(result) -> list[dict]:
    """The report's rows of matrix ops kept per request (a weight read per request, or attention), with why."""
    from hexfuse.graph_passes.combine.price import MATRIX
    from hexfuse.graph_passes.combine.report import to_json

    return [row for row in to_json(result)["kept_per_request"] if row["op"] in MATRIX]


def _write_report(combined: Path, result) -> None:
    """``hexfuse combine``'s report beside the combined model, named as the command names it: why each node kept
    per request was kept."""
    from hexfuse.graph_passes.combine.cli import report_paths
    from hexfuse.graph_passes.combine.report import to_json_text, to_markdown
    from hexfuse.graph_passes.load.io import write_files

    markdown, json_path = report_paths(combined)
    write_files([(markdown, to_markdown(result).encode()), (json_path, to_json_text(result).encode())])


def matrix_weight_bytes(result) -> tuple[int, int]:
    """Bytes of the weights every matrix op of the merged model reads (each request its own) and of those the
    combined model reads (the combined chains' weights once): what one run reads, not only the combined chains."""
    from hexfuse.graph_passes.combine.plan import constant_sources
    from hexfuse.graph_passes.combine.price import MATRIX

    view, memo = result.view, {}
    merged = 0
    for index, node in enumerate(view.nodes):
        if node.op_type in MATRIX and view.request_of[index] >= 0:
            sources = frozenset().union(*(constant_sources(view, t, memo) for t in node.input if t in view.constant))
            merged += sum(view.weight_bytes[s] for s in sources)
    saved = sum(result.prices[i].weight_bytes_apart - result.prices[i].weight_bytes_combined for i in result.chosen)
    return merged, merged - saved


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


def _replay(path: Path, target: str, log_dir: Path, timeout_s: float) -> tuple[Replayed | None, str]:
    """(the replay, failure note) of QNN's schedule of ``path`` on ``target`` (prepared when not cached)."""
    from hexfuse.graph_passes.combine.schedule import replayed
    from hexfuse.graph_passes.cost.target import load_target
    from hexfuse.graph_passes.load.io import file_sha256
    from hexfuse.tools.bench.bench_realsize import prepare

    _, failure = prepare(path, target, timeout_s, log_dir)
    if failure:
        return None, failure
    found = replayed(path, file_sha256(path), load_target(target))
    return (None, "hexfuse engines wrote no schedule") if found is None else (found, "")


def bench(config: str | Config, prefill: int | None, decodes: list[int], precision: str, iters: int, threads: int,
          targets: list[str], timeout_s: float, legacy: bool = False, past: int | None = None,
          attention: str = "auto") -> Measured:
    from hexfuse.graph_passes.combine.run import combine_requests
    from hexfuse.graph_passes.merge.requests import merge_requests

    spec = config if isinstance(config, Config) else config_of(config)
    past = (0 if legacy else default_past(prefill)) if past is None else past
    layers = _layers(spec, prefill, decodes, precision, legacy, past if prefill else 0, attention)
    names = [name for name, _ in layers]
    form = "legacy" if legacy else "deployed"
    label = _label(spec, layers)
    say = lambda text: print(f"bench_combine: {label} {precision} {form}: {text}", file=sys.stderr, flush=True)  # noqa: E731
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
    measured = Measured(label, names, precision, form, past if prefill and not legacy else 0,
                        requantized=len(result.requantized))
    merged_bytes, combined_bytes = matrix_weight_bytes(result)
    measured.weight_mb = {"merged": round(merged_bytes / 1e6, 2), "combined": round(combined_bytes / 1e6, 2)}
    measured.kept_matrix = kept_matrix_ops(result)
    if result.requantize_change is not None:
        measured.requantize_change = {c.request: c.max_rel for c in result.requantize_change.checks}
    _write_report(combined_path, result)
    measured.verification = [{"request": c.request, "outputs": c.outputs, "bit_exact": c.exact,
                              "max_rel": c.max_rel, "max_steps": c.max_steps, "within": c.within,
                              "independent": c.independent}
                             for c in result.verification.checks]
    own = {name: own_inputs(path, layer, 7 + i) for i, ((name, layer), path) in enumerate(zip(layers, paths))}
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
            found, note = _replay(path, target, folder, timeout_s)
            if note:
                measured.notes.append(f"{form} on {target}: {note}")
            measured.replay_us[target][form] = found.latency_us if found else None
            measured.dma_mb[target][form] = found.dma_mb if found else None
            if found is not None:
                measured.dma_parts_mb.setdefault(target, {})[form] = found.dma_parts_mb
        parts = [_replay(p, target, folder, timeout_s) for p in paths]
        if all(found is not None for found, _ in parts):
            measured.replay_us[target]["apart"] = round(sum(found.latency_us for found, _ in parts), 1)
            measured.dma_mb[target]["apart"] = round(sum(found.dma_mb for found, _ in parts), 2)
        else:
            measured.notes += [f"apart on {target}: {note}" for _, note in parts if note]
    return measured


def render(rows: list[Measured]) -> str:
    lines = ["| requests | precision | form | CPU ms apart / merged / combined | combined vs merged: speedup [CI], rounds | "
             "weights read MB merged -> combined | verification | replay t2 us apart / merged / combined | "
             "DMA MB apart / merged / combined |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cpu = " / ".join(f"{r.cpu_ms[f]:.1f}" for f in FORMS if f in r.cpu_ms) or "-"
        s = r.cpu_speedup.get("combined_vs_merged")
        speedup = (f"{s['speedup']:.2f}x [{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}], "
                   f"{min(s['rounds']):.2f}-{max(s['rounds']):.2f}" if s and s["rounds"] else "-")
        checks = ", ".join(f"{v['request']} {v['bit_exact']}/{v['outputs']} exact" for v in r.verification)
        replay = "; ".join(f"{t}: " + " / ".join(_f(v.get(f)) for f in FORMS) for t, v in r.replay_us.items()) or "-"
        dma = "; ".join(f"{t}: " + " / ".join(_f(v.get(f)) for f in FORMS) for t, v in r.dma_mb.items()) or "-"
        lines.append(f"| {r.label} | {r.precision}{' (requantized)' if r.requantized else ''} | {r.form} | {cpu} | {speedup} | "
                     f"{r.weight_mb['merged']:.1f} -> {r.weight_mb['combined']:.1f} | {checks} | {replay} | {dma} |")
    return "\n".join(lines)


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hexfuse.tools.bench.bench_combine", description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help=f"one of {sorted(CONFIGS)}, or a Hugging Face config.json path")
    ap.add_argument("--prefill", type=int, default=None, help="prompt tokens of the prefill request (none: decodes only)")
    ap.add_argument("--decodes", type=int, nargs="+", default=[], help="KV length of each decode request")
    ap.add_argument("--precision", default="float", choices=PRECISIONS)
    ap.add_argument("--iters", type=int, default=25, help="CPU iterations, each running every form (0: no CPU timing)")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    ap.add_argument("--targets", nargs="*", default=[], help="replay QNN's schedule on these targets (HTP simulator)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per simulator preparation")
    ap.add_argument("--legacy", action="store_true", help="the legacy layer form (tools/realsize.py Layer) instead "
                    "of the deployed one (tools/realsize_deployed.py)")
    ap.add_argument("--past", type=int, default=None, help="cached tokens the deployed prefill reads (default: "
                    f"{CONTEXT} - prefill, what a deployed graph of context {CONTEXT} reads; 0: none)")
    ap.add_argument("--attention", default="auto", choices=ATTENTION, help="the deployed decodes' attention (auto: "
                    "grouped over the KV heads while the cache fits a quarter of VTCM, else per head)")
    ap.add_argument("--json", help="append the row to this JSON file")
    args = ap.parse_args(argv)
    try:
        row = bench(args.config, args.prefill, args.decodes, args.precision, args.iters, args.threads,
                    args.targets, args.timeout, args.legacy, args.past, args.attention)
    except HexfuseError as exc:
        print(f"hexfuse: error: {exc}", file=sys.stderr)
        return 1
    print(f"layer form: {row.form}" + (f", the prefill over {row.past} cached tokens" if row.past else ""))
    print(render([row]))
    for target, forms in row.dma_parts_mb.items():
        print(f"DMA MB on {target}, weights / spill+fill / other: " + "; ".join(
            f"{form} {v['weights']:.1f} / {v['spill_fill']:.1f} / {v['other']:.1f}" for form, v in forms.items()))
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
