"""hexfuse op package generator: fusion spec -> QNN HTP op package source tree + host build.

    spec (graph_passes.spec) --lower--> OpPlan (buffers, tasks, tiles, micro-ops) --render--> files
                                                                                  --build--> host .so

The generator consumes the spec only; ``cli.py`` is the one place that opens the fused ONNX model, and
only to check that the spec describes it.
"""

import functools


@functools.cache
def supported_op_types() -> frozenset[str]:
    """ONNX op types (default domain) the kernel library can run: the pass fuses nothing else."""
    from hexfuse.op_package.lower import RULES

    return frozenset(RULES)
