"""The ``Scorer`` interface of the selection, and its simplest implementation.

``hexfuse`` scores groups with the cost model (graph_passes.cost.CostScorer, per target). The
balance scorer here needs no target: a fused group can at best hide the shorter tasks behind the
longest one, so its predicted gain is (sum - max) / sum of rough per-engine durations. Tests use it
(min_gain=0) where the structure of a rewrite, not its payoff, is under test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hexfuse.graph_passes.spec.model import FusedOp, TaskSpec

# Rough v73-class rates per nanosecond; order-of-magnitude guesses (estimate), not measurements.
MATRIX_MACS_PER_NS = 2048.0
VECTOR_BYTES_PER_NS = 128.0
DMA_BYTES_PER_NS = 32.0


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    gain: float  # predicted fraction of serial time saved
    reason: str  # why accepted or rejected, for reports
    details: dict[str, float]  # named predictions (durations in ns, baselines) for reports
    saved_ns: float = 0.0  # predicted time saved against the best existing execution: what the selection maximizes


class Scorer(Protocol):
    name: str

    def score(self, op: FusedOp) -> Verdict: ...


def estimated_ns(task: TaskSpec) -> float:
    if task.engine == "matrix":
        return task.macs / MATRIX_MACS_PER_NS
    if task.engine == "vector":
        return task.bytes_moved / VECTOR_BYTES_PER_NS
    return task.bytes_moved / DMA_BYTES_PER_NS


@dataclass(frozen=True)
class BalanceScorer:
    min_gain: float = 0.1
    name: str = "balance"

    def score(self, op: FusedOp) -> Verdict:
        durations = [estimated_ns(task) for task in op.tasks]
        total = sum(durations)
        gain = (total - max(durations)) / total if total > 0 else 0.0
        details = {f"{task.id}.{task.engine}_ns": round(ns, 3) for task, ns in zip(op.tasks, durations)}
        if gain < self.min_gain:
            return Verdict(False, gain, f"unbalanced: predicted gain {gain:.3f} < margin {self.min_gain}", details)
        return Verdict(True, gain, f"balanced: predicted gain {gain:.3f}", details, total - max(durations))
