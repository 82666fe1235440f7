"""Does fusion pay at the sizes QNN users run? Real-dimension decoder layers (tools/realsize.py), QNN's
own schedule of each (``hexfuse engines``, the x86 HTP simulator), and the schedule replay per
candidate group (graph_passes/cost/schedule_verdict.py), one table row per model and target.

    layer ── build (cached) ── hexfuse engines --target T (timed, timeout) ── engine map (user cache)
                                                                              │
          analyze with the schedule (summary.schedule: replay, busy, HVX beside HMX) ◄─┤
          analyze --ignore-schedule (the estimated cost model's candidate groups) ◄────┘
                └── per candidate: ScheduleJudge.verdict (t2, t4, task work, added ns, why)

The ceiling of a model is what overlap could hide at most: the vector work of all candidates together
(their QNN ops' time without dispatch/launch overheads), against the replayed latency of the original.

    python -m hexfuse.tools.bench.bench_realsize                                # the default list, sm8650
    python -m hexfuse.tools.bench.bench_realsize llama-3.2-1b:decode:2048 --targets sm8650 sm8750 --json out.json
    python -m hexfuse.tools.bench.bench_realsize llama-3.2-1b:prefill:128+llama-3.2-1b:decode:512   # two requests
    python -m hexfuse.tools.bench.bench_realsize llama-3.2-1b:prefill:1024:attn:g4 anchor:googlenet_w8a8 yolov8n:640
    python -m hexfuse.tools.bench.bench_realsize --render out.json other.json                      # tables again
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.realsize import Layer, Requests, build, cache_dir, parse_layer
from hexfuse.tools.realsize_heads import cross_head_pairs
from hexfuse.tools.realsize_vision import Anchor, Detector, parse_vision

if TYPE_CHECKING:  # (the pass is imported where it runs)
    from hexfuse.graph_passes.cost.replay import FusedForm

Source = Layer | Requests | Anchor | Detector

DEFAULT_LAYERS = ("llama-3.2-1b:prefill:128", "llama-3.2-1b:decode:512")
PREPARE_TIMEOUT_S = 1800.0
MIN_GAIN = 0.1  # the CLI's default margin


@dataclass
class Candidate:
    label: str
    vector_us: float  # the vector tasks' QNN ops, their work without dispatch/launch overheads
    matrix_us: float  # the matrix task's HMX ops
    added_us: float | None  # entry/exit ordering ops, port copies, launches (None: not reached)
    t2_us: float
    t4_us: float | None
    accepted: bool
    reason: str
    t4_any_us: float | None = None  # the fused form replayed whatever the verdict's margin (None: not holdable)
    copies: int = 0  # copies the fused form adds (replay.py: O, I, X, and per task output a join J and C)
    held: str = ""  # why there is no fused form ("" where there is one)
    origin: str = "pass"  # "pass": find_candidates / the estimated model's groups; "heads": realsize_heads pairs
    estimated: str = ""  # the estimated cost model (--ignore-schedule): selected / accepted / rejected
    work: dict[int, float] = field(default_factory=dict, repr=False)  # vector op index -> ns (for the ceiling)

    @property
    def credited_us(self) -> float | None:
        """What overlap can be credited with: t2 - t4, at most the task work less the added ops (the
        verdict's cap; a larger replay saving is the rest of the graph re-ordered)."""
        t4 = self.t4_any_us if self.t4_any_us is not None else self.t4_us
        if t4 is None or self.added_us is None:
            return None
        return min(self.t2_us - t4, self.vector_us - self.added_us)

    @property
    def ratio(self) -> float | None:
        """fused/original in the replay (t4/t2), margin or not."""
        t4 = self.t4_any_us if self.t4_any_us is not None else self.t4_us
        return t4 / self.t2_us if t4 is not None and self.t2_us else None


@dataclass
class Row:
    model: str
    target: str
    prepare_s: float | None = None  # None: a cached map whose prepare time was not recorded
    note: str = ""  # why there is no schedule (timeout, failure)
    schedule: dict[str, Any] = field(default_factory=dict)
    fused_with_schedule: int = 0
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def ceiling_us(self) -> float:
        """The vector work of all candidates, each QNN op once (a vector task pairs with several matrix ops)."""
        work = {i: ns for c in self.candidates for i, ns in c.work.items()}
        return sum(work.values()) / 1e3


def parse_source(text: str) -> Source:
    """A vision model (realsize_vision: ``anchor:NAME``, ``yolov8n:SIZE``) or a decoder layer / two requests."""
    return parse_vision(text) or parse_layer(text)


def build_source(source: Source) -> Path:
    return source.build() if isinstance(source, Anchor) else build(source)


def engines_of(source: Source, target: str) -> Path | None:
    """A map kept outside the engines cache (the anchors'), else None (found by the model's hash)."""
    return source.engines(target) if isinstance(source, (Anchor, Detector)) else None


def _map_of(path: Path, target: str, engines: Path | None = None):
    from hexfuse.graph_passes.engines.engine_map import find_engine_map
    from hexfuse.graph_passes.load.io import file_sha256

    return find_engine_map(path, file_sha256(path), target, engines).engine_map


def cached_schedule(path: Path, stem: str, target: str, engines: Path | None = None):
    """The QNN schedule in the cached engine map of ``path`` on ``target``, or one error line."""
    found = _map_of(path, target, engines)
    if found is None or found.schedule is None:
        raise HexfuseError(f"no schedule for {stem} on {target}: run the bench on it first")
    return found.schedule


def prepare(path: Path, target: str, timeout_s: float, log_dir: Path,
            engines: Path | None = None) -> tuple[float | None, str]:
    """``hexfuse engines`` for one model and target unless its map is cached: (seconds, failure note)."""
    found = _map_of(path, target, engines)
    times = log_dir / "prepare_seconds.json"  # what earlier runs measured, by model file and target
    known = json.loads(times.read_text()) if times.is_file() else {}
    if found is not None and found.schedule is not None:
        return known.get(f"{path.name}:{target}"), ""
    log = log_dir / f"{path.stem}.{target}.engines.log"
    start = time.perf_counter()
    try:
        with open(log, "w") as out:
            done = subprocess.run([sys.executable, "-m", "hexfuse.cli", "engines", str(path), "--target", target],
                                  stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return timeout_s, f"simulator prepare did not finish in {timeout_s:.0f} s"
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        return seconds, f"hexfuse engines failed (exit {done.returncode}): {tail[0][:200]}"
    known[f"{path.name}:{target}"] = round(seconds, 1)
    tmp = times.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
    os.replace(tmp, times)
    return seconds, ""


def _analyze(path: Path, target: str, use_schedule: bool, min_gain: float, engines: Path | None = None):
    from hexfuse import analyze_model
    from hexfuse.graph_passes.cost.cli import scorer_for

    scorer = scorer_for(target, min_gain, model=path, engines=engines, use_schedule=use_schedule)
    return analyze_model(path, scorer), scorer


def reordered_ns(judge) -> float:
    """The original replayed in the one order fuse_group gives both lanes (ops by their replayed start),
    nothing fused: what t4 gains from that order alone, not from fusion, is t2 minus this."""
    from hexfuse.graph_passes.cost.replay import Graph, _stable_order, replay

    base, before = judge.base, judge.original
    rank = {i: (before.starts[i], k) for k, i in enumerate((*base.main, *base.vec))}
    members = list(range(len(base.lanes)))
    for i in members:
        rank.setdefault(i, (before.starts[i], len(rank)))
    order, _ = _stable_order(members, [set(p) for p in base.preds], rank, {i: str(i) for i in members})
    graph = Graph(base.lanes, base.run, base.transfer, base.preds, tuple(i for i in order if base.lanes[i] == "main"),
                  tuple(i for i in order if base.lanes[i] == "vec"), base.dma_start)
    return replay(graph, judge.target.hvx_contexts).latency_ns


def fused_replay(judge, shape) -> tuple[float | None, Any, str]:
    """(t4 ns, the fused form, why none) of ``shape`` replayed whatever the verdict's margin says: the
    verdict stops at its first "no", the tables want the fused form's figures wherever one exists."""
    from hexfuse.graph_passes.cost.replay import Unholdable, fuse_group, replay

    try:
        fused = fuse_group(judge.schedule, judge.costs, judge.target, shape, (judge.base, judge.original))
    except Unholdable as chain:
        return None, None, f"cannot be held together: {chain}"
    if fused is None:
        return None, None, "folded away (a task runs no op of its own)"
    return replay(fused.graph, judge.target.hvx_contexts).latency_ns, fused, ""


def judge_candidates(path: Path, target: str, min_gain: float, engines: Path | None = None,
                     extra=None) -> tuple[dict[str, Any], int, list[Candidate]]:
    """(summary.schedule of the analyze JSON, groups fused with the schedule, every independent pair the
    pass finds (candidates.py) with the estimated model's verdict and the schedule replay's). ``extra``:
    analysis -> more task pairs to judge the same way (pairs the pass's partner search does not propose)."""
    from hexfuse.graph_passes.analysis.candidates import find_candidates
    from hexfuse.graph_passes.cost.schedule_verdict import ScheduleJudge, group_of
    from hexfuse.graph_passes.report.outputs import analysis_report
    from hexfuse.graph_passes.spec.builder import fused_op_spec

    result, scorer = _analyze(path, target, True, min_gain, engines)
    data = analysis_report(result, scorer, path.name)
    summary = (data.get("summary") or {}).get("schedule") or {}
    fused = len(data.get("groups") or [])
    schedule = scorer.engines.schedule if scorer.engines is not None else None
    if schedule is None:
        return summary, fused, []
    judge = ScheduleJudge(schedule, scorer.target, min_gain)
    costs, ops = judge.costs, schedule.ops
    summary = {**summary, "replay_reordered_us": round(reordered_ns(judge) / 1e3, 3)}
    estimated, estimator = _analyze(path, target, False, min_gain, engines)
    analysis = estimated.analysis
    chosen = {tuple(t.id for t in g.tasks) for g in estimated.selection.groups}
    pairs = [(analysis.tasks[p.first], analysis.tasks[p.second]) for p in find_candidates(analysis).pairs]
    groups = [g.tasks for g in estimated.selection.groups if len(g.tasks) > 2] + pairs
    known = {tuple(t.id for t in tasks) for tasks in groups}
    added = [tuple(tasks) for tasks in (extra(analysis) if extra else []) if tuple(t.id for t in tasks) not in known]
    out = []
    for tasks in groups + added:
        spec = fused_op_spec(analysis, tasks)
        shape = group_of(spec)
        if not shape.matrix_nodes:
            continue  # no matrix task: nothing on HMX for the vector work to hide behind
        verdict = judge.verdict(spec)
        guess = estimator.score(spec)
        d = verdict.details
        vector = [i for i in schedule.of_nodes(set().union(*shape.task_nodes)) if ops[i].resource != "dma"]
        hmx = [i for i in schedule.of_nodes(shape.matrix_nodes) if ops[i].resource == "hmx"]
        names = lambda matrix: "+".join(n.name.removesuffix("_node") for t in spec.tasks  # noqa: E731
                                        if (t.engine == "matrix") == matrix for n in t.nodes
                                        if n.op_type not in ("QuantizeLinear", "DequantizeLinear"))[:48]
        t4_any, form, held = fused_replay(judge, shape)
        picked = "selected" if tuple(t.id for t in tasks) in chosen else ("accepted" if guess.accepted else "rejected")
        out.append(Candidate(
            label=f"{names(True)} || {names(False)}",
            vector_us=sum(costs.run[i] - costs.overhead[i] for i in vector) / 1e3,
            matrix_us=sum(costs.run[i] for i in hmx) / 1e3,
            added_us=form.added_ns / 1e3 if form is not None else None,
            t2_us=judge.original.latency_ns / 1e3,
            t4_us=d["schedule.t4_ns"] / 1e3 if "schedule.t4_ns" in d else None,
            t4_any_us=None if t4_any is None else t4_any / 1e3, held=held,
            copies=_copies(form) if form is not None else 0,
            accepted=verdict.accepted, reason=verdict.reason, estimated=picked,
            origin="heads" if tuple(tasks) in added else "pass",
            work={i: costs.run[i] - costs.overhead[i] for i in vector}))
    return summary, fused, out


def _copies(form: FusedForm) -> int:
    """The copies the fused form adds that move bytes (replay.py: O, I, X, J, C)."""
    roles = ("copies_out", "carrier_in", "matrix_out", "joins", "outputs_in")
    return sum(1 for role in roles for i in form.parts[role] if form.graph.run[i] > 0)


def bench(layers: list[Source], targets: list[str], timeout_s: float, min_gain: float, log_dir: Path,
          say=print) -> list[Row]:
    rows = []
    for layer in layers:
        start = time.perf_counter()
        path = build_source(layer)
        say(f"# {layer.stem}: built in {time.perf_counter() - start:.0f} s ({path.stat().st_size / 2**20:.0f} MB) {path}")
        for target in targets:
            row = Row(layer.stem, target)
            engines = engines_of(layer, target)
            extra = cross_head_pairs(layer) if isinstance(layer, Layer) and layer.head_groups > 1 else None
            row.prepare_s, row.note = prepare(path, target, timeout_s, log_dir, engines)
            say(f"# {layer.stem} {target}: prepare {'cached' if row.prepare_s is None else f'{row.prepare_s:.0f} s'}"
                f"{' - ' + row.note if row.note else ''}")
            if not row.note:
                row.schedule, row.fused_with_schedule, row.candidates = judge_candidates(path, target, min_gain, engines, extra)
            rows.append(row)
            say(render([row], header=False))
    return rows


def _cell(label: str) -> str:
    """A candidate's label inside a markdown table ('||' would split the cell)."""
    return label.replace(" || ", " ∥ ")


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def render(rows: list[Row], header: bool = True, top: int = 0) -> str:
    """``top``: per model and target only the candidates the replay reached (t4), best ratio first, at most that many."""
    if top:
        rows = [Row(r.model, r.target, r.prepare_s, r.note, r.schedule, r.fused_with_schedule,
                    sorted((c for c in r.candidates if c.ratio is not None), key=lambda c: c.ratio)[:top]) for r in rows]
    lines = []
    if header:
        lines += ["| model | target | prepare s | QNN ops | HMX ops | replay us | main / HVX busy us | HVX ops beside HMX | "
                  "est. share | candidates | ceiling us (% of replay) | fused w/ schedule |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r.schedule
        if not s:
            lines.append(f"| {r.model} | {r.target} | {_f(r.prepare_s, 0)} | {r.note or 'no schedule'} |||||||||")
            continue
        ceiling = r.ceiling_us
        lines.append(f"| {r.model} | {r.target} | {'cached' if r.prepare_s is None else f'{r.prepare_s:.0f}'} | "
                     f"{s['qnn_ops']} | {s['hmx_ops']} | {s['replay_us']:.1f} | {s['main_busy_us']:.1f} / "
                     f"{s['hvx_busy_us']:.1f} | {s['hvx_beside_hmx']} of {s['hvx_ops']} | {s['estimated_share']:.2f} | "
                     f"{len(r.candidates)} | {ceiling:.2f} ({100 * ceiling / s['replay_us']:.2f}%) | {r.fused_with_schedule} |")
    if header and any(r.candidates for r in rows):
        lines += ["", "| model | target | candidate (matrix ∥ vector) | vector us | matrix us | added us | copies | t2 us | "
                      "t4 us | fused/original | estimated | schedule verdict |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for c in r.candidates:
            if header:
                why = c.reason.rsplit(": ", 1)[-1] if c.reason.startswith("replay") else c.reason.split(":")[0]
                t4 = c.t4_any_us if c.t4_any_us is not None else c.t4_us
                label = _cell(f"{c.label} (head groups)" if c.origin == "heads" else c.label)
                lines.append(f"| {r.model} | {r.target} | {label} | {c.vector_us:.2f} | {c.matrix_us:.1f} | "
                             f"{_f(c.added_us, 2)} | {c.copies} | {c.t2_us:.1f} | {_f(t4)} | {_f(c.ratio, 3)} | {c.estimated} | "
                             f"{'fuse' if c.accepted else 'no'}: {why} |")
            else:
                lines.append(f"#   {c.label}: vector {c.vector_us:.2f} us, matrix {c.matrix_us:.1f} us, "
                             f"added {_f(c.added_us, 2)} us, t2 {c.t2_us:.1f}, t4 {_f(c.t4_any_us)}, estimated {c.estimated}: {c.reason[:160]}")
    return "\n".join(lines)


def render_summary(rows: list[Row]) -> str:
    """One line per model and target: the ceiling, and the best any candidate does in the replay."""
    lines = ["| model | target | prepare s | t2 us | ceiling us (% of t2) | candidates | held together | task work > added | "
             "best t4 us | best fused/original (candidate) | its copies | best overlap credit us (% of t2) | fused |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r.schedule:
            lines.append(f"| {r.model} | {r.target} | {_f(r.prepare_s, 0)} | {r.note or 'no schedule'} ||||||||||")
            continue
        replayed = [c for c in r.candidates if c.ratio is not None]
        best = min(replayed, key=lambda c: c.ratio, default=None)
        covered = sum(1 for c in replayed if c.added_us is not None and c.vector_us > c.added_us)
        credit = max((c.credited_us for c in replayed if c.credited_us is not None), default=None)
        t2 = r.schedule["replay_us"]
        lines.append(f"| {r.model} | {r.target} | {_f(r.prepare_s, 0)} | {t2:.1f} | "
                     f"{r.ceiling_us:.1f} ({100 * r.ceiling_us / t2:.1f}%) | {len(r.candidates)} | "
                     f"{len(replayed)} | {covered} | {_f(best.ratio * best.t2_us) if best else '-'} | "
                     f"{_f(best.ratio, 3) if best else '-'} ({_cell(best.label) if best else 'none replayed'}) | "
                     f"{best.copies if best else '-'} | "
                     f"{'-' if credit is None else f'{credit:.1f} ({100 * credit / t2:.1f}%)'} | {sum(c.accepted for c in r.candidates)} |")
    return "\n".join(lines)


def to_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [{"model": r.model, "target": r.target, "prepare_s": r.prepare_s, "note": r.note, "schedule": r.schedule,
             "fused_with_schedule": r.fused_with_schedule, "ceiling_us": r.ceiling_us,
             "candidates": [{**{k: v for k, v in c.__dict__.items() if k != "work"}, "ratio": c.ratio}
                            for c in r.candidates]} for r in rows]


def from_json(rows: list[dict[str, Any]]) -> list[Row]:
    """Rows written by ``--json`` (the per-op work of the ceiling is not kept: the stored ceiling is)."""
    out = []
    for r in rows:
        keep = [Candidate(**{k: v for k, v in c.items() if k != "ratio"}) for c in r["candidates"]]
        row = Row(r["model"], r["target"], r["prepare_s"], r["note"], r["schedule"], r["fused_with_schedule"], keep)
        if keep:
            keep[0].work = {-1: r["ceiling_us"] * 1e3}  # one entry carries the stored ceiling
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hexfuse.tools.bench.bench_realsize", description=__doc__.split("\n\n")[0])
    ap.add_argument("layers", nargs="*", default=list(DEFAULT_LAYERS), help="CONFIG:MODE:SIZE[:PRECISION]")
    ap.add_argument("--targets", nargs="+", default=["sm8650"])
    ap.add_argument("--timeout", type=float, default=PREPARE_TIMEOUT_S, help="seconds per simulator prepare")
    ap.add_argument("--min-gain", type=float, default=MIN_GAIN)
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--render", nargs="+", metavar="ROWS.json", help="print the table of earlier --json files, run nothing")
    ap.add_argument("--summary", action="store_true", help="one line per model and target instead of every candidate")
    ap.add_argument("--top", type=int, default=0, help="per model and target, only the N best replayed candidates")
    args = ap.parse_args(argv)
    if args.render:
        rows = [row for name in args.render for row in from_json(json.loads(Path(name).read_text()))]
        print(render_summary(rows) if args.summary else render(rows, top=args.top))
        return 0
    try:
        layers = [parse_source(text) for text in args.layers]
        log_dir = cache_dir() / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        rows = bench(layers, args.targets, args.timeout, args.min_gain, log_dir,
                     say=lambda m: print(m, file=sys.stderr, flush=True))
    except HexfuseError as exc:
        print(f"hexfuse: error: {exc}", file=sys.stderr)
        return 1
    print(render_summary(rows) if args.summary else render(rows, top=args.top))
    if args.json:
        tmp = f"{args.json}.tmp{os.getpid()}"
        Path(tmp).write_text(json.dumps(to_json(rows), indent=1))
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
