"""hexfuse: horizontal fusion of independent matrix / vector / DMA work for Qualcomm Hexagon NPUs.

The public API. The repository's rooms are installed under this one name:

    hexfuse.graph_passes   ONNX pass: find independent work of different engines, fuse it (fusion spec)
    hexfuse.op_package     fusion spec -> QNN HTP op package (sources, build)
    hexfuse.tools          A/B harness and benchmarks
    hexfuse.qnn_configs    data: cost-model targets, QNN EP presets
    hexfuse.cli            the ``hexfuse`` command, on top of all of them

Dependencies run one way (cli -> tools -> op_package -> graph_passes); the pass learns which ops the
backend can run through a ``Backend`` (graph_passes/backend.py: data), not by importing the op package.
"""

from __future__ import annotations

from pathlib import Path

from hexfuse.graph_passes.balance import Scorer
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes import pipeline as _pipeline
from hexfuse.op_package import backend, supported_op_types

__all__ = ["HexfuseError", "analyze_model", "backend", "fuse_model", "supported_op_types"]


def analyze_model(path: str | Path, scorer: Scorer | None = None, allow_scalar: bool = False) -> _pipeline.AnalyzeResult:
    """What could be fused in the model at ``path`` and why not, limited to what the op package runs
    well on HTP (``allow_scalar``: also vector tasks whose kernels have no HVX path yet)."""
    return _pipeline.analyze_model(path, scorer, backend(allow_scalar))


def fuse_model(path: str | Path, scorer: Scorer | None = None, allow_scalar: bool = False) -> _pipeline.FuseResult:
    """The fused model (bytes), its fusion spec and report data; ``allow_scalar`` as in analyze_model."""
    return _pipeline.fuse_model(path, scorer, backend(allow_scalar))
