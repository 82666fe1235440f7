"""hexfuse op package generator: fusion spec -> QNN HTP op package source tree + host build.

    spec (graph_passes.spec.model) --lower--> OpPlan (buffers, tasks, tiles, micro-ops) --render--> files
                                                                                  --build--> host .so

The generator consumes the spec only; ``cli.py`` is the one place that opens the fused ONNX model, and
only to check that the spec describes it.
"""

import functools


@functools.cache
def backend(allow_scalar: bool = False):
    """The pass's view of this package (graph_passes/backend.py): ops with a kernel; matrix tasks must
    expand into QNN's own ops (op_package/htp_expand.py) and, unless ``allow_scalar``, every kernel of
    the other tasks needs an HVX path (op_package/hvx_coverage.py)."""
    if not isinstance(allow_scalar, bool):  # "no" would be true
        raise TypeError(f"allow_scalar must be True or False, not {allow_scalar!r}")
    from hexfuse.graph_passes.backend import Backend
    from hexfuse.op_package.htp_expand import matrix_blocker
    from hexfuse.op_package.hvx_coverage import vector_blocker

    def task_blocker(op) -> str | None:
        if op.tasks[0].engine == "matrix":
            return matrix_blocker(op)
        return None if allow_scalar else vector_blocker(op)

    return Backend("qnn-htp" if not allow_scalar else "qnn-htp (scalar vector kernels allowed)",
                   supported_op_types(), task_blocker)


@functools.cache
def supported_op_types() -> frozenset[str]:
    """ONNX op types (default domain) the kernel library can run: the pass fuses nothing else."""
    from hexfuse.op_package.lower import RULES

    return frozenset(RULES)
