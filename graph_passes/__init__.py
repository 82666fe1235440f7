"""hexfuse graph pass: find independent matrix/vector/DMA work in ONNX models and fuse it."""

from graph_passes.errors import HexfuseError
from graph_passes.pipeline import analyze_model, fuse_model

__all__ = ["HexfuseError", "analyze_model", "fuse_model"]
