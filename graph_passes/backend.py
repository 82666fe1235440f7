"""What the backend that runs fused nodes can do, handed to the pass as data.

The pass never imports the op package (tests/test_layering.py): the caller says which op types have a
kernel and why a task cannot run well there (the QNN HTP package hands matrix work to QNN's own ops,
op_package/htp_expand.py, and runs the rest on HVX threads, op_package/hvx_coverage.py).
``hexfuse.fuse_model`` passes the op package's; ``None`` everywhere means no limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hexfuse.graph_passes.spec.model import FusedOp

TaskCheck = Callable[[FusedOp], "str | None"]  # a one-task FusedOp -> why it cannot run there, or None


@dataclass(frozen=True)
class Backend:
    name: str
    supported_ops: frozenset[str] | None = None  # op types a fused node may hold (None: any)
    task_check: TaskCheck | None = None  # a task the backend refuses, with the reason


def supported(backend: Backend | None) -> frozenset[str] | None:
    return backend.supported_ops if backend is not None else None
