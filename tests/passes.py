"""The pass as most tests drive it: the op package's backend with scalar vector kernels allowed, and the
cost model pricing fused nodes as the design has them (``as_designed``).

The pass's own mechanics (independence, rewrite, verification, sharing) are tested on float models too,
whose vector kernels have no HVX path yet (op_package/hvx_coverage.py), and on the groups the design's
fused node would win: priced as the generated package builds it, no bundled model fuses anything
(docs/where-it-pays.md). Tests of what HTP targets refuse, and of the defaults, call
``hexfuse.analyze_model`` / ``hexfuse.fuse_model`` directly.
"""

from __future__ import annotations

from pathlib import Path

import hexfuse
from hexfuse.graph_passes.cost.cli import scorer_for
from hexfuse.graph_passes.pipeline import DEFAULT_MIN_GAIN, DEFAULT_TARGET, AnalyzeResult, FuseResult
from hexfuse.graph_passes.select.balance import Scorer


def designed_scorer(target: str = DEFAULT_TARGET, min_gain: float = DEFAULT_MIN_GAIN) -> Scorer:
    """The default target and margin, with fused nodes priced as designed."""
    return scorer_for(target, min_gain, as_designed=True)


def analyze_model(path: str | Path, scorer: Scorer | None = None) -> AnalyzeResult:
    return hexfuse.analyze_model(path, scorer or designed_scorer(), allow_scalar=True)


def fuse_model(path: str | Path, scorer: Scorer | None = None) -> FuseResult:
    return hexfuse.fuse_model(path, scorer or designed_scorer(), allow_scalar=True)
