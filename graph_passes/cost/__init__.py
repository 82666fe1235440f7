"""Cost model of hexfuse: per-target engine figures, per-op costs, a tile schedule simulator, quota
search and the ``CostScorer`` that the selection pass calls for every candidate group.

    target.py    load/validate qnn_configs/targets/*.json          opcost.py   per-node/task engine costs
    simulate.py  tiles on lanes (HMX, HVX quota, DMA = DDR share)  quota.py    HVX/VTCM/tile search
    baselines.py the four baselines of DESIGN.md section 7         scorer.py   CostScorer (Scorer protocol)
    calibrate.py fit per-op-class factors from a QNN profile CSV   timeline.py Perfetto JSON, PNG, Markdown
    cli.py       ``hexfuse calibrate`` and the report helpers for ``hexfuse fuse --target``
    summary.py          the whole model's predicted latency, before and after fusion, on one denominator
    model_time.py       predicted time of a whole model, fused or not: what ``--micro-batches`` compares
    replay.py           replay QNN's own schedule (happens-before graph), original and with one group fused
    schedule_verdict.py decide an HTP fusion from that replay of the original, not from estimates
    profile_rows.py     QNN profile rows -> model nodes -> engines (``hexfuse ab`` and ``hexfuse calibrate``)
"""

from typing import TYPE_CHECKING

from hexfuse.graph_passes.cost.target import Target, list_targets, load_target

if TYPE_CHECKING:
    from hexfuse.graph_passes.cost.scorer import CostScorer

__all__ = ["CostScorer", "Target", "list_targets", "load_target"]


def __getattr__(name: str) -> object:
    """CostScorer on first use: the scorer imports numpy, which `hexfuse calibrate --help` (whose
    parser imports cost.cli, so this package) should not wait for."""
    if name == "CostScorer":
        from hexfuse.graph_passes.cost.scorer import CostScorer

        return CostScorer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
