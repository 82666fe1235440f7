"""Lowering rules: one ONNX node -> one kernel call of the C++ kernel library (see context.py)."""

from hexfuse.op_package.lower import (index_ops, layout_ops, linalg, logic_ops, math_ops, norm_ops,  # noqa: F401
                                      quant_ops, qvector_ops)  # (register rules)
from hexfuse.op_package.lower.context import RULES, Kernel, NodeContext

__all__ = ["RULES", "Kernel", "NodeContext"]
