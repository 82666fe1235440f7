"""``--micro-batches N``: split where exact, fuse both forms, keep the one the cost model prefers.

    model ──plan_split──> refused (reason) ───────────────────────────────> fused model as without the flag
      │                   exact ──> split_model ──> fuse ──> model time ──┐
      └─────────────────────────────────────────> fuse ──> model time ──┴─> split only if faster by SPLIT_MARGIN

A split pays only through the fusion it enables: by itself it adds a dispatch per copied op, a Split
and a Concat, and fills HMX tiles less (cost/model_time.py). So the choice needs both fused results,
which is why it is a flag of ``fuse`` (and ``analyze``) rather than a ``split`` command that would
write a slower model whenever the fuse after it found nothing worth fusing. ``--split always`` splits
wherever exact, but ``fuse`` refuses a split predicted slower than the unsplit model unless ``--force``
(``analyze`` only says so).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from hexfuse.graph_passes.backend import Backend
from hexfuse.graph_passes.cost.model_time import ModelTime, model_time
from hexfuse.graph_passes.cost.scorer import CostScorer
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.model import LoadedModel, fixed_dims
from hexfuse.graph_passes.microbatch.split import SplitPlan, plan_split, split_model
from hexfuse.graph_passes.pipeline import AnalyzeResult, FuseResult, analyze_model, fuse_model
from hexfuse.graph_passes.spec.builder import fused_op_spec

SPLIT_MARGIN = 0.05  # the whole-model estimate is coarse: split only for a clear predicted win


@dataclass(frozen=True)
class MicroBatchDecision:
    requested: int
    split: bool
    reason: str  # one line: why split, or why not
    plan: str = ""  # SplitPlan.describe() where the split is exact
    unsplit_time: ModelTime | None = None
    split_time: ModelTime | None = None

    def markdown(self) -> str:
        lines = ["## Micro-batches", "", f"- requested: {self.requested}", f"- decision: {self.reason}"]
        if self.plan:
            lines.append(f"- exact split: {self.plan}")
        for label, time in (("unsplit, fused", self.unsplit_time), ("split, fused", self.split_time)):
            if time is not None:
                lines.append(f"- predicted {label}: {time.describe()}")
        return "\n".join(lines) + "\n"


def _time(analyzed: AnalyzeResult, scorer: CostScorer) -> ModelTime:
    analysis = analyzed.analysis
    fused = {task.id for group in analyzed.selection.groups for task in group.tasks}
    singles = [fused_op_spec(analysis, (task,)) for task in analysis.tasks if task.fusable and task.id not in fused]
    groups = [(op, group.verdict) for op, group in zip(analyzed.fused_ops, analyzed.selection.groups)]
    return model_time(groups, singles, scorer)


def _as_original(analyzed: AnalyzeResult, original: LoadedModel) -> None:
    """Name the original file as the source (report, spec hash, the CLI's output check, the files it
    must not overwrite, the verification's run of the file) of the split result."""
    analyzed.loaded = replace(analyzed.loaded, path=original.path, raw=original.raw, sha256=original.sha256,
                              external=original.external)


def _run(path: Path, scorer: CostScorer, backend: Backend | None, fuse: bool) -> FuseResult | AnalyzeResult:
    return fuse_model(path, scorer, backend) if fuse else analyze_model(path, scorer, backend)


def _decide(path: str | Path, count: int, scorer: CostScorer, backend: Backend | None,
            axis: int | None, always: bool, fuse: bool, force: bool = False):
    original = _run(Path(path), scorer, backend, fuse)
    base = original.analyzed if fuse else original
    if base.already_fused:
        return original, MicroBatchDecision(count, False, "not split: the model is already fused")
    plan = plan_split(base.loaded.inferred, count, axis)
    if not isinstance(plan, SplitPlan):
        return original, MicroBatchDecision(count, False, f"not split: {plan}")
    split = split_model(base.loaded.model, plan)
    with tempfile.TemporaryDirectory(prefix="hexfuse-split-") as folder:
        split_path = Path(folder) / base.loaded.path.name
        split_path.write_bytes(split.SerializeToString())
        with fixed_dims({}):  # made from the loaded model: --fix-dim pins are in it already
            candidate = _run(split_path, scorer, backend, fuse)
    tried = candidate.analyzed if fuse else candidate
    before, after = _time(base, scorer), _time(tried, scorer)
    pays = bool(tried.fused_ops) and after.total_ns < before.total_ns * (1.0 - SPLIT_MARGIN)
    saving = 1.0 - after.total_ns / before.total_ns if before.total_ns > 0 else 0.0
    change = f"saves {saving:.1%}" if saving >= 0 else f"costs {-saving:.1%} more"
    predicted = (f"{len(tried.fused_ops)} fused groups, {after.total_ns / 1e3:.1f} us vs "
                 f"{before.total_ns / 1e3:.1f} us unsplit ({change})")
    if not pays and not always:
        why = f"not split: split and fused predicts {predicted}, needs {SPLIT_MARGIN:.0%}; --split always forces it"
        return original, MicroBatchDecision(count, False, why, plan.describe(), before, after)
    slower = after.total_ns > before.total_ns
    if slower and fuse and not force:
        ratio = after.total_ns / before.total_ns if before.total_ns > 0 else float("inf")
        raise HexfuseError(f"--split always: the split model is predicted {ratio:.2f}x slower than unsplit "
                           f"({predicted}); --force writes it anyway")
    _as_original(tried, base.loaded)
    if fuse:
        candidate.spec = replace(candidate.spec, source_sha256=base.loaded.sha256)
        candidate.changed = True  # the split alone changes the model: the verification runs the original too
        candidate.split = count
    forced = " (--split always --force: predicted slower)" if slower and fuse else " (--split always)"
    why = f"split into {count}{forced if not pays else ''}: {predicted}"
    if slower and not fuse:
        why += "; predicted slower, so `fuse` refuses it without --force"
    return candidate, MicroBatchDecision(count, True, why, plan.describe(), before, after)


def fuse_micro_batched(path: str | Path, count: int, scorer: CostScorer, backend: Backend | None = None,
                       axis: int | None = None, always: bool = False,
                       force: bool = False) -> tuple[FuseResult, MicroBatchDecision]:
    """The fused model, split into ``count`` micro-batches where exact and predicted faster (``always``:
    wherever exact, e.g. to measure on a device what the uncalibrated cost model predicts; a split
    predicted slower than unsplit is refused unless ``force``)."""
    return _decide(path, count, scorer, backend, axis, always, fuse=True, force=force)


def analyze_micro_batched(path: str | Path, count: int, scorer: CostScorer, backend: Backend | None = None,
                          axis: int | None = None, always: bool = False) -> tuple[AnalyzeResult, MicroBatchDecision]:
    return _decide(path, count, scorer, backend, axis, always, fuse=False)


__all__ = ["MicroBatchDecision", "analyze_micro_batched", "fuse_micro_batched"]
