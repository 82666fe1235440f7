"""QNN's own schedule of the merged and the combined model, replayed, where ``hexfuse engines`` made one.

``hexfuse engines MODEL --target T`` prepares a model in the HTP simulator and keeps its schedule in the
user cache under the model's sha256; ``hexfuse combine`` writes the same bytes for the same input, so after

    hexfuse combine merged.onnx -o combined.onnx
    hexfuse engines merged.onnx --target sm8650 ; hexfuse engines combined.onnx --target sm8650
    hexfuse combine merged.onnx -o combined.onnx --target sm8650

the report gives both forms' replayed latency (t2) and the bytes their DMA ops move. The replay's decode
figures are 2-10x off published ones (the issue on LLM fidelity), so they are reported, not obeyed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hexfuse.graph_passes.cost.replay import graph_of, op_costs, replay
from hexfuse.graph_passes.cost.target import Target
from hexfuse.graph_passes.engines.engine_map import find_engine_map


@dataclass(frozen=True)
class Replayed:
    latency_us: float  # the replay of QNN's run lists (t2)
    dma_mb: float  # bytes QNN's DMA ops move (DDR <-> VTCM: weights, spills, fills)
    dma_parts_mb: dict[str, float] = field(default_factory=dict)  # the same by kind (dma_parts)


def dma_parts(schedule) -> dict[str, float]:
    """MB QNN's DMA ops move, by kind: weights (into VTCM), spill_fill (tensors VTCM could not hold, out to DDR and
    back), other (graph inputs and outputs, activations, biases)."""
    parts = {"weights": 0, "spill_fill": 0, "other": 0}
    for op in schedule.ops:
        if op.resource == "dma":
            kind = "weights" if "weights_to_vtcm" in op.kernel else \
                "spill_fill" if op.kernel in ("@Spill", "@Fill") else "other"
            parts[kind] += op.ddr_bytes
    return {kind: round(nbytes / 1e6, 2) for kind, nbytes in parts.items()}


def replayed(model: Path, sha256: str, target: Target) -> Replayed | None:
    """The replay of the cached schedule of the model with this sha256 on ``target``; None without one."""
    found = find_engine_map(model, sha256, target.name).engine_map
    if found is None or found.schedule is None:
        return None
    schedule = found.schedule
    latency = replay(graph_of(schedule, op_costs(schedule, target)), target.hvx_contexts).latency_ns
    return Replayed(round(latency / 1e3, 1), round(sum(op.ddr_bytes for op in schedule.ops if op.resource == "dma") / 1e6, 2),
                    dma_parts(schedule))
