"""Whole-model LLM latency from one replayed layer (issue 43): per model, phase and target, the predicted time of one
token (decode) or one prompt pass (prefill), the DDR floor, what bounds it, and the published figure where
tools/anchors/llm_published.csv has one.

    python -m hexfuse.tools.llm_predict CONFIG.json --phase decode --kv 4095 --precision w4a16 --target sm8750 --json
    python -m hexfuse.tools.llm_predict CONFIG.json --phase prefill --tokens 128 --kv 3968 --target sm8750 --json
    python -m hexfuse.tools.llm_predict --table [--targets sm8650 sm8750]     # every published row, markdown

    predicted = layers x t2(one deployed layer, QNN's schedule replayed) + LM head + embedding rows
                + splits x graph_execute_ns (the runtime's call into the HTP, once per context binary)
    floor     = bytes read once: every layer's weights + the 8-bit KV cache + LM head + embedding rows, at peak DDR

One layer in the deployed form (tools/realsize_deployed.py) is built (cached), prepared on the QNN EP's HTP simulator
with optrace once (`hexfuse engines`: its schedule, cached by the model's hash; progress on stderr), and replayed with
the target's fitted constants (graph_passes/cost/replay.py), its quantized matrix work at the fitted share of the 8-bit
HMX rate where activations are 16-bit (``priced_for``: w8a16, w4a16). The LM head is priced as one HMX op, not
prepared: its MACs at the HMX rate or its weights at the sustained DDR rate, whichever is longer, plus one per-op
constant (a 128256 x 2048-4096 projection is 0.5-1 GB of float weights to quantize, minutes and gigabytes per model
here).
Weights are stored at the precision's width (w4: 0.5 B, w8: 1 B, float: 2 B), the LM head at 8 bits in a w4a16 model
(as Qualcomm exports it: LM_HEAD_BYTES). A deployed model is cut into
context binaries (``splits``: 3 for Llama-3.2-1B/3B, 4 for Llama-2-7B, 5 for Llama-3-8B in quic/ai-hub-models'
model.py NUM_SPLITS; the table's ``splits`` column), each pass executes each once, and each execution costs the
target's ``graph_execute_ns`` (fitted by tools/bench/fit_replay.py --joint on vision and LLM rows together: a vision
inference is one execution).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError

ROOT = Path(__file__).resolve().parent
PUBLISHED = ROOT / "anchors" / "llm_published.csv"
CONFIGS = ROOT / "anchors" / "llm_configs"
WEIGHT_BYTES = {"w4a16": 0.5, "w8a16": 1.0, "w8a8": 1.0, "float": 2.0}
# Qualcomm's w4a16 exports keep the LM head at 8 bits per channel (quic/ai-hub-models v0.46.1,
# qai_hub_models/models/_shared/llm/_utils.py: _set_lm_head_to_8b; info.yaml: "w4a16 + w8a16 (few layers)")
LM_HEAD_BYTES = {"w4a16": 1.0, "w8a16": 1.0, "w8a8": 1.0, "float": 2.0}
ACT_BYTES = {"w4a16": 2, "w8a16": 2, "w8a8": 1, "float": 2}
KV_BYTES = 1  # 8-bit KV cache (deployed form)
DEFAULT_CONTEXT = 4096
DEFAULT_SPLITS = 4  # context binaries per pass where the table has no row for the model (Llama-2-7B's count)


@dataclass(frozen=True)
class Prediction:
    model: str
    phase: str
    target: str
    precision: str
    tokens: int
    kv: int  # cached tokens the pass reads
    layers: int
    layer_ms: float  # one layer's replayed t2
    lm_head_ms: float
    embedding_ms: float
    splits: int  # context binaries one pass executes
    execute_ms: float  # splits x the target's graph_execute_ns: the runtime's calls (fitted)
    predicted_ms: float
    floor_ms: float  # bytes read once at peak DDR bandwidth
    bound: str  # what bounds the layer in the replay: DDR | DMA (the queue of weight moves) | HVX | main thread (HMX)
    layer_floor_ms: float  # the layer's DDR bytes at the sustained rate (the replay's floor)
    published_ms: float | None = None
    published_source: str = ""

    @property
    def ratio(self) -> float | None:
        return self.predicted_ms / self.published_ms if self.published_ms else None


def weight_params(config) -> tuple[int, int, int]:
    """(parameters of one layer's projections, LM head parameters, embedding row length)."""
    c = config
    attn = c.hidden * (c.heads + 2 * c.kv_heads) * c.head_dim + c.heads * c.head_dim * c.hidden
    mlp = 3 * c.hidden * c.mlp
    return attn + mlp, c.hidden * c.vocab, c.hidden


def floor_bytes(config, precision: str, tokens: int, kv: int) -> float:
    """What one pass reads at least once: weights, the 8-bit KV cache (and writes: the new K/V), the LM head,
    the embedding rows."""
    layer, head, row = weight_params(config)
    w = WEIGHT_BYTES[precision]
    cache = 2 * config.kv_heads * config.head_dim * (kv + tokens) * KV_BYTES
    return config.layers * (layer * w + cache) + head * LM_HEAD_BYTES[precision] + tokens * row * 2


def priced_for(target, precision: str):
    """The target as a layer of ``precision`` runs on it: quantized matrix work with 16-bit activations (w8a16,
    w4a16) at hmx_a16_rate_fraction of the 8-bit HMX rate. (The schedule does not say an op's activation width;
    the precision does.)"""
    if precision == "float" or ACT_BYTES[precision] == 1:
        return target
    return target.with_values(hmx_int8_macs_per_cycle=target.hmx_int8_macs_per_cycle * target.hmx_a16_rate_fraction)


def lm_head_ns(config, precision: str, tokens: int, target) -> float:
    from hexfuse.graph_passes.cost.replay import op_constant

    _, head, _ = weight_params(config)
    target = priced_for(target, precision)
    rate = target.hmx_fp16_macs_per_cycle if precision == "float" else target.hmx_int8_macs_per_cycle
    compute = tokens * head / (rate * target.clock_ghz)
    ddr = head * LM_HEAD_BYTES[precision] / target.ddr_sustained_bytes_per_ns
    return max(compute, ddr) + op_constant(target.qnn_op_ns, compute, target)


def embedding_ns(config, tokens: int, target) -> float:
    return tokens * config.hidden * 2 / target.ddr_sustained_bytes_per_ns


def pass_ns(config, layer_ns: float, precision: str, tokens: int, splits: int, target) -> float:
    """One whole pass from one replayed layer: the layers, the LM head, the embedding rows, one execution per
    context binary."""
    return (config.layers * layer_ns + lm_head_ns(config, precision, tokens, target) + embedding_ns(config, tokens, target)
            + splits * target.graph_execute_ns)


def splits_for(model: str) -> int:
    """Context binaries of the model as published (the table's ``splits``), else DEFAULT_SPLITS."""
    return next((int(r["splits"]) for r in published_rows() if r["model"] == model), DEFAULT_SPLITS)


def layer_schedule(config, phase: str, tokens: int, kv: int, precision: str, target_name: str, log=None,
                   prepare: bool = True):
    """QNN's schedule of one deployed layer on ``target_name`` (built, prepared and cached when missing; with
    ``prepare`` False a missing layer or schedule is an error instead)."""
    from hexfuse.graph_passes.engines.engine_map import cache_path, find_engine_map
    from hexfuse.graph_passes.load.io import file_sha256
    from hexfuse.tools.realsize import build, cache_dir
    from hexfuse.tools.realsize_deployed import DeployedLayer

    say = log or (lambda text: print(f"llm_predict: {text}", file=sys.stderr, flush=True))
    size, past = (kv, 0) if phase == "decode" else (tokens, kv)
    layer = DeployedLayer(config, phase, size, precision, past=past)
    path = cache_dir() / f"{layer.stem}.{layer.key}.onnx"
    if not prepare and not path.is_file():
        raise HexfuseError(f"{layer.stem}: not built (and not to be prepared here)")
    if not path.is_file():
        say(f"{config.name}: building the {phase} layer ({precision}, {tokens} new over {kv} cached tokens; cached)")
    path = build(layer)
    sha = file_sha256(path)
    found = find_engine_map(path, sha, target_name, None).engine_map
    if (found is None or found.schedule is None) and not prepare:
        raise HexfuseError(f"{layer.stem}: no schedule on {target_name} (and not to be prepared here)")
    if found is None or found.schedule is None:
        from hexfuse.tools.qnn_engines import build_engine_map

        say(f"{config.name}: preparing {path.name} on the HTP simulator for {target_name} (optrace; once, then cached)")
        found = build_engine_map(path, target_name)
        out = cache_path(sha, target_name)
        out.parent.mkdir(parents=True, exist_ok=True)
        found.write(out)
    if found.schedule is None:
        raise HexfuseError(f"llm_predict: the engine map of {path.name} on {target_name} holds no schedule")
    return found.schedule


def bound_of(replayed, schedule, costs, hvx_threads: int) -> str:
    """DDR where the floor ends the replay, else the busiest lane (realsize_bound.Bound weighs the floor as one more
    lane: a layer whose floor falls between its busiest lane and its end is DDR there, not here)."""
    if replayed.ddr_bound:
        return "DDR"
    main = sum(costs.run[i] for i in schedule.main)
    hvx = sum(costs.run[i] for i in schedule.vec) / hvx_threads
    dma = sum(costs.transfer)
    lanes = {"main thread (HMX)": main, "HVX": hvx, "DMA": dma}
    return max(lanes, key=lanes.get)


def predict(config, phase: str, target, precision: str = "w4a16", tokens: int | None = None, kv: int | None = None,
            context: int = DEFAULT_CONTEXT, schedule=None, log=None, splits: int | None = None) -> Prediction:
    """One model x phase x target. ``tokens`` defaults to 1 (decode) / 128 (prefill); ``kv`` (cached tokens) to
    what a deployed graph of ``context`` reads: context - tokens; ``splits`` to the model's as published."""
    from hexfuse.graph_passes.cost.replay import graph_of, op_costs, replay

    if phase not in ("decode", "prefill"):
        raise HexfuseError(f"llm_predict: phase must be decode or prefill, got {phase!r}")
    if precision not in WEIGHT_BYTES:
        raise HexfuseError(f"llm_predict: precision must be one of {sorted(WEIGHT_BYTES)}, got {precision!r}")
    tokens = 1 if phase == "decode" else (tokens or 128)
    splits = splits_for(config.name) if splits is None else splits
    if splits < 1:
        raise HexfuseError(f"llm_predict: splits must be 1 or more, got {splits}")
    kv = context - tokens if kv is None else kv
    if schedule is None:
        schedule = layer_schedule(config, phase, tokens, kv, precision, target.name, log)
    costs = op_costs(schedule, priced_for(target, precision))
    replayed = replay(graph_of(schedule, costs), target.hvx_contexts)
    layer_ns = replayed.latency_ns
    head = lm_head_ns(config, precision, tokens, target)
    embed = embedding_ns(config, tokens, target)
    total = pass_ns(config, layer_ns, precision, tokens, splits, target)
    floor = floor_bytes(config, precision, tokens, kv) / target.ddr_gbps
    published = published_row(config.name, phase, target.name, precision)
    return Prediction(config.name, phase, target.name, precision, tokens, kv, config.layers, layer_ns / 1e6, head / 1e6,
                      embed / 1e6, splits, splits * target.graph_execute_ns / 1e6, total / 1e6, floor / 1e6,
                      bound_of(replayed, schedule, costs, target.hvx_contexts), replayed.ddr_floor_ns / 1e6,
                      *(published or (None, "")))


def published_rows(path: Path = PUBLISHED) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def published_row(model: str, phase: str, chipset: str, precision: str) -> tuple[float, str] | None:
    for row in published_rows():
        if (row["model"], row["phase"], row["chipset"], row["precision"]) == (model, phase, chipset, precision):
            return float(row["milliseconds"]), f"{row['source']}@{row['commit'][:8]} ({row['runtime']}, {row['device']})"
    return None


def config_for(name_or_path: str):
    from hexfuse.tools.realsize import Config

    path = Path(name_or_path)
    if not path.is_file():
        path = CONFIGS / f"{name_or_path}.json"
    if not path.is_file():
        raise HexfuseError(f"llm_predict: no config.json at {name_or_path} (nor {CONFIGS}/{name_or_path}.json)")
    return Config.from_hf(path)


def table_rows(targets: list[str] | None = None, log=None) -> list[Prediction]:
    """Every published row (tools/anchors/llm_published.csv) on its target."""
    from hexfuse.graph_passes.cost.target import load_target

    out = []
    for row in published_rows():
        if targets and row["chipset"] not in targets:
            continue
        config = config_for(row["model"])
        tokens, context = int(row["tokens"]), int(row["context"])
        out.append(predict(config, row["phase"], load_target(row["chipset"]), row["precision"], tokens,
                           context - tokens, context, log=log))
    return out


def render(rows: list[Prediction]) -> str:
    lines = ["| model | phase | target | layers x layer ms | LM head ms | predicted ms | DDR floor ms | bound | "
             "published ms | predicted / published |", "|---|---|---|---|---|---|---|---|---|---|"]
    for p in rows:
        pub = f"{p.published_ms:.1f}" if p.published_ms else "-"
        ratio = f"{p.ratio:.2f}" if p.ratio else "-"
        lines.append(f"| {p.model} | {p.phase} {p.tokens} over {p.kv} | {p.target} | {p.layers} x {p.layer_ms:.3f} | "
                     f"{p.lm_head_ms:.2f} | {p.predicted_ms:.1f} | {p.floor_ms:.1f} | {p.bound} | {pub} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from hexfuse.graph_passes.cost.target import load_target

    ap = argparse.ArgumentParser(prog="python -m hexfuse.tools.llm_predict", description=__doc__.split("\n\n")[0])
    ap.add_argument("config", nargs="?", help="a Hugging Face config.json (Llama family), or a name in tools/anchors/llm_configs")
    ap.add_argument("--phase", choices=("decode", "prefill"), default="decode")
    ap.add_argument("--tokens", type=int, help="new tokens of a prompt pass (default 128; decode: 1)")
    ap.add_argument("--kv", type=int, help="cached tokens the pass reads (default: context - tokens)")
    ap.add_argument("--context", type=int, default=DEFAULT_CONTEXT, help="the deployed graph's context (default 4096)")
    ap.add_argument("--precision", default="w4a16", choices=sorted(WEIGHT_BYTES))
    ap.add_argument("--splits", type=int, help="context binaries per pass (default: the published model's, else "
                                               f"{DEFAULT_SPLITS})")
    ap.add_argument("--target", default="sm8750")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--table", action="store_true", help="every published row (tools/anchors/llm_published.csv)")
    ap.add_argument("--targets", nargs="*", help="with --table: these targets only")
    args = ap.parse_args(argv)
    try:
        if args.table:
            rows = table_rows(args.targets)
            print(json.dumps([asdict(r) for r in rows], indent=1) if args.json else render(rows))
            return 0
        if not args.config:
            ap.error("a config.json (or --table)")
        result = predict(config_for(args.config), args.phase, load_target(args.target), args.precision, args.tokens,
                         args.kv, args.context, splits=args.splits)
    except HexfuseError as exc:
        print(f"hexfuse: error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(result), indent=1) if args.json else render([result]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
