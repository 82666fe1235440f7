"""Refuse runs that did not run where they were asked to: numbers are printed only for runs that did.

    placement   a fused run may not put more nodes on the CPU EP, nor cut the graph into more
                partitions, than the original run the same way (QNN EP: CPU fallback of inlined
                function bodies, e.g. initializers turned into overridable inputs)
    providers   a QNN session must hold the QNN EP (ORT's wrapper can retry a failed session on CPU)
    claims      with an op package, every fused node runs as one node of its own op type on the EP
                that was asked for (the package claimed it; ORT did not inline the function)
"""
from __future__ import annotations

from collections import Counter

from hexfuse.graph_passes.errors import HexfuseError

from .qnn_session import QNN_EP, Assignment
from .sessions import RunConfig

CPU_EP = "CPUExecutionProvider"


def _cpu_summary(assign: Assignment) -> str:
    ops = Counter(n["op_type"] for n in assign.nodes if n["ep"] == CPU_EP)
    top = ", ".join(f"{op} x{k}" for op, k in ops.most_common(3))
    return f"{sum(ops.values())} nodes on CPU" + (f" ({top})" if top else "")


def check_placement(cfg: RunConfig, run: Assignment, reference: Assignment) -> None:
    """QNN EP: the fused run's CPU share and partition count must not exceed the original's."""
    cpu, ref_cpu = run.per_ep.get(CPU_EP, 0), reference.per_ep.get(CPU_EP, 0)
    parts, ref_parts = run.n_subgraphs, reference.n_subgraphs
    if cpu > ref_cpu or parts > ref_parts:
        raise HexfuseError(f"{cfg.label} ran differently from the original on the {cfg.ep} EP: {_cpu_summary(run)} "
                           f"in {parts} partitions, the original {ref_cpu} nodes on CPU in {ref_parts} "
                           f"({cfg.model_path}); no numbers reported")


def check_providers(cfg: RunConfig, providers: list[str]) -> None:
    if cfg.ep == "qnn" and QNN_EP not in providers:
        raise HexfuseError(f"{cfg.label}: the session runs on {providers}, not the QNN EP ({cfg.model_path})")


def check_claims(cfg: RunConfig, run: Assignment, fused: dict[str, int], ep: str) -> None:
    """Every fused node (op type -> count) ran as itself on ``ep``: claimed, not inlined."""
    got = Counter(n["op_type"] for n in run.nodes if n["ep"] == ep and n["op_type"] in fused)
    missing = sorted(t for t, want in fused.items() if got.get(t, 0) < want)
    if missing:
        eps = ", ".join(f"{k}={v}" for k, v in sorted(run.per_ep.items()))
        what = "op package" if ep == QNN_EP else "custom-op library"
        raise HexfuseError(f"{cfg.label}: the {what} did not claim fused op(s) {missing} in {cfg.model_path} "
                           f"(nodes per EP: {eps}); the function was inlined instead")


def check_ran_on_qnn(cfg: RunConfig, run: Assignment) -> None:
    if not any(n["ep"] == QNN_EP for n in run.nodes):
        raise HexfuseError(f"{cfg.label}: the QNN EP ran no node of {cfg.model_path}: everything fell back to CPU "
                           f"(bad provider option, missing backend, or unsupported ops)")
