"""Which kernels of the library have an HVX path on Hexagon builds.

On HTP a fused op's non-matrix tasks run as package ops on an HVX thread (htp_expand.py). A kernel
without an HVX path runs there as scalar C: slower than the QNN op it replaces, so for HTP targets
the pass does not fuse a task holding one (``vector_blocker``; the user may ask otherwise). The table
names each kernel whose source reaches a ``hexfuse_hvx_*`` routine (tests/op_package/test_hvx_coverage.py
reads the sources to keep it true; the routines themselves are checked under qemu in test_hvx.py).
"""

from __future__ import annotations

from collections.abc import Callable

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import FusedOp
from hexfuse.op_package.lower.context import Kernel


def _op_field_in(*ops: str) -> Callable[[Kernel], bool]:
    """Kernels whose HVX path covers some of their ops only (the ``op`` field names the op)."""
    def covers(kernel: Kernel) -> bool:
        return dict(kernel.fields).get("op", "").rsplit("::", 1)[-1] in ops
    return covers


def _always(kernel: Kernel) -> bool:
    return True


# kernel function -> does this instance take the HVX path (what the path does)
HVX_PATHS: dict[str, Callable[[Kernel], bool]] = {
    "qlookup_u8": _always,  # any 8-bit unary op as a 256-entry table (vlut32)
    "qbinary_8": _always,  # 8-bit Add / Sub / Mul with integer requantization
    "qrowmean_8": _always,  # 8-bit mean over trailing axes (byte sums)
    "qmaxpool_8": _always,  # 8-bit MaxPool / GlobalMaxPool (row and window max)
    "unary_f32": _op_field_in("kRelu", "kClip"),
    "binary_f32": _op_field_in("kMax", "kMin"),
    "typed_binary": _always,  # logic ops on bool / integer vectors
    "not_bool": _always,
    # moves: contiguous runs go through hvx_copy (Slice: when the innermost step is 1, decided at run time)
    "copy_any": _always,
    "strided_copy": _always,
    "concat_any": _always,
    "split_any": _always,
    "slice_any": _always,
}


def has_hvx_path(kernel: Kernel) -> bool:
    covers = HVX_PATHS.get(kernel.fn)
    return covers is not None and covers(kernel)


def vector_blocker(op: FusedOp) -> str | None:
    """Why the non-matrix tasks of ``op`` would run as scalar code on HTP (None: every kernel has an HVX path)."""
    from hexfuse.op_package.htp_expand import task_ops  # htp_expand plans with the lowering rules

    try:
        planned = task_ops(op)
    except HexfuseError as why:
        return f"the op package cannot plan it: {why}"
    for task_op in planned:
        for node in task_op.plan.nodes:
            if not has_hvx_path(node.kernel):
                # no node name: the verdict is shared by every task of the same structure
                return (f"on HTP every vector kernel needs an HVX path: {node.op_type} ({node.kernel.fn}) "
                        "has none yet (--allow-scalar fuses it anyway)")
    return None
