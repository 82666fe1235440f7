"""hexfuse op package generator: fusion spec -> QNN HTP op package source tree + host build.

    spec (graph_passes.spec) --lower--> OpPlan (buffers, tasks, tiles, micro-ops) --render--> files
                                                                                  --build--> host .so

The generator consumes the spec only; ``cli.py`` is the one place that opens the fused ONNX model, and
only to check that the spec describes it.
"""

import functools


@functools.cache
def backend():
    """The pass's view of this package (graph_passes/backend.py): ops with a kernel, and matrix tasks the
    HTP build can hand to QNN's own ops (a fused op whose matrix task cannot be expanded cannot run on
    HTP, op_package/htp_expand.py)."""
    from hexfuse.graph_passes.backend import Backend
    from hexfuse.op_package.htp_expand import matrix_blocker

    return Backend("qnn-htp", supported_op_types(), matrix_blocker)


@functools.cache
def supported_op_types() -> frozenset[str]:
    """ONNX op types (default domain) the kernel library can run: the pass fuses nothing else."""
    from hexfuse.op_package.lower import RULES

    return frozenset(RULES)
