"""hexfuse graph pass: find independent matrix/vector/DMA work in ONNX models and fuse it.

The entry points are ``pipeline.analyze_model`` / ``pipeline.fuse_model``; ``hexfuse.fuse_model`` calls
them with the op package's capability table.
"""
