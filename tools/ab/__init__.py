"""A/B harness: run an original and a fused ONNX model side by side and report whether fusion pays."""
