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
from typing import TYPE_CHECKING, Any

from hexfuse.graph_passes.errors import HexfuseError

if TYPE_CHECKING:
    from hexfuse.graph_passes import pipeline as _pipeline
    from hexfuse.graph_passes.select.balance import Scorer

__all__ = ["HexfuseError", "analyze_model", "backend", "fuse_model", "supported_op_types"]


def __getattr__(name: str) -> Any:
    """``backend`` and ``supported_op_types`` load the op package on first use: importing ``hexfuse``
    (as the command does before parsing its arguments) loads neither onnx nor numpy."""
    if name in ("backend", "supported_op_types"):
        from hexfuse import op_package

        return getattr(op_package, name)
    raise AttributeError(f"module 'hexfuse' has no attribute {name!r}")


def analyze_model(path: str | Path, scorer: Scorer | None = None, allow_scalar: bool = False) -> _pipeline.AnalyzeResult:
    """What could be fused in the model at ``path`` and why not, limited to what the op package runs
    well on HTP (``allow_scalar``: also vector tasks whose kernels have no HVX path yet)."""
    from hexfuse.graph_passes import pipeline
    from hexfuse.op_package import backend

    return pipeline.analyze_model(path, scorer, backend(allow_scalar))


def fuse_model(path: str | Path, scorer: Scorer | None = None, allow_scalar: bool = False) -> _pipeline.FuseResult:
    """The fused model (bytes), its fusion spec and report data; ``allow_scalar`` as in analyze_model."""
    from hexfuse.graph_passes import pipeline
    from hexfuse.op_package import backend

    return pipeline.fuse_model(path, scorer, backend(allow_scalar))
