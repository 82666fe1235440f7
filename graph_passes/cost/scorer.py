"""``CostScorer``: the Scorer of graph_passes.select.balance backed by the target cost model.

    score(op) ─> per-task costs (cached per task) ─> optimistic bound ── below margin ──> reject (why)
                                                          └─> quota search + 4 baselines ─> accept/reject

The verdict's ``gain`` is the time saved against the best existing execution (baseline 2), as a
fraction of it; ``details`` holds the four baselines (ns), entry-merge and overlap gains, the chosen
quota, per-task times and the op / HVX-launch counts that price dispatch_ns and hvx_launch_ns, so
reports can print them (and how much of a gain rests on those estimates) without re-running the model.

On HTP a group is fused only where its tasks are predicted to overlap on their engines (overlap gain
> 0): entry merging alone rests on the per-op estimates and, with the matrix task expanded into QNN's
own ops, mostly disappears. ``allow_merge_only`` lifts that rule.

The fused node is priced as the package builds it (op_package/htp_expand.py): every task but the matrix
work is a package op on an HVX thread, so a group needs matrix work on HMX to overlap anything; and what
holds the group together (entry, joins, their ports in main memory, QNN's copies for them) is added to
both fused runs, priced as the replay prices those ops (``package_ns``). ``as_designed`` prices instead
the design's fused node (DESIGN.md: one entry, task tensors resident in VTCM, a DMA lane): a what-if
ceiling for a package that does not exist, and what the rewrite's mechanics are tested with.

Where the engine map carries QNN's schedule of the original (engine_map.py), that schedule decides
instead (schedule_verdict.py): the group's fused form is replayed against the original, per instance,
and the estimated baselines stay in the details for the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hexfuse.graph_passes.select.balance import Verdict
from hexfuse.graph_passes.cost.baselines import (
    Baselines,
    alone_plan,
    best_existing,
    fused_contexts,
    overhead_ns,
    predict,
    vtcm_ordered,
)
from hexfuse.graph_passes.cost.opcost import Storage, TaskCost, task_cost
from hexfuse.graph_passes.cost.replay import expansion
from hexfuse.graph_passes.cost.schedule_verdict import ScheduleJudge, group_of
from hexfuse.graph_passes.cost.simulate import Infeasible, simulate
from hexfuse.graph_passes.cost.target import Target
from hexfuse.graph_passes.engines.engine_map import EngineMap
from hexfuse.graph_passes.spec.model import FusedOp, TaskSpec, structure_key

UNBALANCED = 0.2  # shorter task below this fraction of the longer one: "unbalanced"
MIN_OVERLAP_NS = 1.0  # an overlap saving below this is rounding in the simulation, not overlap
DDR_BOUND = 0.6  # a task spending this fraction of its time on DDR transfers is DDR-bound
CACHE_LIMIT = 200_000
PACKAGE_REASON = "package: holding the group together adds"  # a rejection the package's own ops decide


@dataclass
class CostScorer:
    target: Target
    min_gain: float = 0.1
    min_overlap: float = 0.0  # also require this engine-overlap gain (3 -> 4), apart from entry merging
    allow_merge_only: bool = False  # also fuse groups whose whole predicted gain is entry merging
    engines: EngineMap | None = None  # the model's engine map (engine_map.py): what QNN runs per node
    engines_note: str = ""  # where that map came from, or why there is none (reports print it)
    use_schedule: bool = True  # where the map holds QNN's schedule, its replay decides (schedule_verdict.py)
    as_designed: bool = False  # what-if: price the fused node as DESIGN.md designs it, not as the package builds it
    name: str = "cost"
    _tasks: dict[tuple, TaskCost] = field(default_factory=dict, repr=False)
    _alone: dict[tuple, float] = field(default_factory=dict, repr=False)
    _verdicts: dict[tuple, Verdict] = field(default_factory=dict, repr=False)
    _predictions: dict[tuple, Baselines] = field(default_factory=dict, repr=False)
    _keys: dict[int, tuple[TaskSpec, tuple]] = field(default_factory=dict, repr=False)  # id(task) -> (task, key)
    _judge: ScheduleJudge | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.name = f"cost[{self.target.name}]"

    # -- per-task, cached ------------------------------------------------------------------------
    def task_costs(self, op: FusedOp) -> tuple[list[tuple], list[TaskCost]]:
        keys, costs, storage = [], [], None
        tensors = {tensor.name: tensor for tensor in op.tensors}
        for task in op.tasks:
            known = self._keys.get(id(task))
            if known is None or known[0] is not task:  # the pass reuses one TaskSpec object per task
                known = self._keys[id(task)] = (task, structure_key(task, tensors.get))
            key = known[1]
            cost = self._tasks.get(key)
            if cost is None:
                storage = storage or Storage(op)
                cost = task_cost(task, op, self.target, storage, self.engines)
                if len(self._tasks) < CACHE_LIMIT:
                    self._tasks[key] = cost
            elif cost.task_id != task.id:
                cost = replace(cost, task_id=task.id)  # shared by structure; lanes are named by task
            keys.append(key)
            costs.append(cost)
        return keys, costs

    def _alone_ns(self, key: tuple, cost: TaskCost) -> float:
        ns = self._alone.get(key)
        if ns is None:
            ns = simulate([alone_plan(cost, self.target)]).makespan
            self._alone[key] = ns
        return ns

    # -- the Scorer protocol ---------------------------------------------------------------------
    def score(self, op: FusedOp) -> Verdict:
        keys, costs = self.task_costs(op)
        package = self.package_ns(op)
        group_key = (tuple(keys), package)  # details name tasks by position, so order is part of the key
        cached = self._verdicts.get(group_key)
        if cached is not None:
            return self._with_schedule(op, cached)
        verdict = self._score(keys, costs, package)
        if len(self._verdicts) < CACHE_LIMIT:
            self._verdicts[group_key] = verdict
        return self._with_schedule(op, verdict)

    @property
    def per_instance(self) -> bool:
        """Verdicts depend on where a group sits in QNN's schedule, not on its structure alone."""
        return self.use_schedule and self.engines is not None and self.engines.schedule is not None

    def schedule_judge(self) -> ScheduleJudge | None:
        """The replay of QNN's schedule of this model (one per scorer), where the engine map holds one."""
        schedule = self.engines.schedule if self.engines is not None and self.use_schedule else None
        if schedule is None:
            return None
        if self._judge is None or self._judge.schedule is not schedule:
            self._judge = ScheduleJudge(schedule, self.target, self.min_gain)
        return self._judge

    def _with_schedule(self, op: FusedOp, estimated: Verdict) -> Verdict:
        """QNN's schedule decides where the engine map has one (per instance: where a group sits in it matters)."""
        judge = self.schedule_judge()
        if judge is None or estimated.reason.startswith("VTCM overflow"):
            return estimated
        return judge.verdict(op)  # the estimated baselines would contradict it: they are left out

    def package_ns(self, op: FusedOp) -> float:
        """What the HTP package as generated adds to hold ``op`` together: its entry and joins, its ops'
        ports in main memory, QNN's copies for them (replay.expansion, as the replay prices them; the
        simulator's schedules of fused models show them, docs/schedule.md section 2). None of it with
        ``as_designed``: the design's single entry, which the package does not build (docs/htp.md section 3)."""
        return 0.0 if self.as_designed else expansion(self.target, group_of(op)).total_ns

    def predict(self, op: FusedOp) -> Baselines:
        """Full prediction with schedules (for timelines and reports), once per group structure."""
        keys, costs = self.task_costs(op)
        package = self.package_ns(op)
        cached = self._predictions.get((tuple(keys), package))
        if cached is None:
            cached = self._predictions[(tuple(keys), package)] = predict(costs, self.target, package_ns=package)
        return cached

    def serial_ns(self, op: FusedOp) -> float:
        """Baseline 1 of the op's tasks: each compute node its own QNN op, one after another."""
        keys, costs = self.task_costs(op)
        return sum(self._alone_ns(k, c) for k, c in zip(keys, costs)) + overhead_ns(costs, self.target)

    def _score(self, keys: list[tuple], costs: list[TaskCost], package: float) -> Verdict:
        try:
            return self._score_feasible(keys, costs, package)
        except Infeasible as exc:  # a task alone, or every concurrent VTCM split, cannot hold one tile
            need = sum(c.min_tile_bytes for c in costs) / 2**20
            return Verdict(False, 0.0, f"VTCM overflow: needs {need:.2f} MB > {self.target.vtcm_mb:g} MB and "
                           f"tiling does not fit ({exc})", {})

    def _score_feasible(self, keys: list[tuple], costs: list[TaskCost], package: float) -> Verdict:
        target = self.target
        if not self.as_designed and not any(c.main_lane == "hmx" for c in costs):
            return Verdict(False, 0.0, (
                "no HMX work: on HTP the package runs every task but the matrix work on an HVX thread (a DMA task "
                "too), beside QNN's own vector ops, which its HVX threads already run side by side; without matrix "
                "work on HMX there is no second engine to overlap (--as-designed prices the design's lanes)"), {})
        alone = [self._alone_ns(k, c) for k, c in zip(keys, costs)]
        details = {f"task{i}.{c.engine}_ns": round(a, 1) for i, (c, a) in enumerate(zip(costs, alone))}
        plans0 = [alone_plan(c, target) for c in costs]
        t2 = best_existing(costs, plans0, alone, target)
        bound = _lower_bound(costs, target) + package
        if 1.0 - bound / t2 < self.min_gain:
            reason = _package_cost(package, t2, bound, self.min_gain) or self._why_not(costs, alone) or (
                f"overheads: even perfect overlap {_saves(1.0 - bound / t2)} < margin {self.min_gain:.0%}")
            details.update(t2_best_existing=round(t2, 1), t4_lower_bound=round(bound, 1), package_ns=round(package, 1))
            return Verdict(False, max(0.0, 1.0 - bound / t2), reason, details)
        base = predict(costs, target, package_ns=package)
        details.update(baseline_details(base, costs))
        gain = base.gain
        if gain < self.min_gain:
            reason = _package_cost(package, t2, base.t4_fused_concurrent, self.min_gain) or self._why_not(costs, alone) or (
                f"overheads: predicted gain {gain:.1%} < margin {self.min_gain:.0%}")
            return Verdict(False, gain, reason, details)
        if not self.allow_merge_only and base.t3_fused_serial - base.t4_fused_concurrent < MIN_OVERLAP_NS:
            reason = self._why_not(costs, alone) or "the tasks do not overlap on their engines"
            return Verdict(False, gain, (
                f"merge only: {reason}; entry merging alone would save {base.entry_merge_gain:.1%}, of which "
                f"{_share(base.constants_ns, base.t1_serial - base.t3_fused_serial)} rests on the dispatch_ns / "
                "hvx_launch_ns estimates (--allow-merge-only fuses it)"), details)
        if self.min_overlap > 0 and base.overlap_gain < self.min_overlap:  # (none at all: the rule above)
            reason = self._why_not(costs, alone) or (
                f"little overlap: engine-overlap gain {base.overlap_gain:.1%} < --min-overlap {self.min_overlap:.0%} "
                f"(entry merge alone would save {base.entry_merge_gain:.1%})")
            return Verdict(False, gain, reason, details)
        return Verdict(True, gain, (
            f"overlap: {base.t4_fused_concurrent / 1e3:.1f} us vs best existing {base.t2_best_existing / 1e3:.1f} us "
            f"(gain {gain:.1%}; entry merge {base.entry_merge_gain:.1%}, overlap {base.overlap_gain:.1%})"), details, base.saved_ns)

    def _why_not(self, costs: list[TaskCost], alone: list[float]) -> str:
        if vtcm_ordered(costs, self.target):
            resident = sum(max(0.0, c.vtcm_bytes - c.ddr_in - c.ddr_out) for c in costs if c.engine != "matrix")
            return (f"VTCM-ordered: the task op's resident tensors ({resident / 2**20:.2f} MB) and the matrix task's "
                    f"smallest tiles do not fit {self.target.vtcm_mb:g} MB together; QNN's VTCM reuse orders them")
        on_hvx = [c for c in costs if c.engine == "matrix" and c.main_lane == "hvx"]
        if on_hvx and len(costs) == 2:  # e.g. an fp32 MatMul that QNN runs on an HVX kernel
            source = "the engine map" if self.engines is not None else "the op-type rules"
            return (f"one engine: the matrix task runs on HVX ({source}), as does the "
                    f"{next(c.engine for c in costs if c is not on_hvx[0])} task")
        order = sorted(range(len(costs)), key=lambda i: alone[i])
        small, big = order[0], order[-1]
        if alone[big] > 0 and alone[small] / alone[big] < UNBALANCED:
            return (f"unbalanced: {costs[small].engine} task is {alone[small] / alone[big]:.0%} of "
                    f"{costs[big].engine} task ({alone[small] / 1e3:.2f} us vs {alone[big] / 1e3:.2f} us)")
        rate = min(self.target.dma_bytes_per_ns, self.target.ddr_bytes_per_ns)
        shares = [(c.ddr_in + c.ddr_out) / rate / a if a > 0 else 0.0 for c, a in zip(costs, alone)]
        if sum(s >= DDR_BOUND for s in shares) >= 2:
            return "DDR-bound: both tasks saturate bandwidth (" + ", ".join(
                f"{c.engine} {s:.0%} of its time on DDR" for c, s in zip(costs, shares)) + ")"
        hvx_users = [c for c in costs if c.main_lane == "hvx" or c.hvx_side_ns > 0]
        if len(hvx_users) >= 2 and any(c.main_lane == "hmx" and c.hvx_side_ns > 0 for c in hvx_users):
            side = sum(c.hvx_side_ns for c in costs if c.main_lane == "hmx") / self.target.hvx_contexts
            matrix = sum(c.main_ns for c in costs if c.main_lane == "hmx")
            if side > 0.3 * matrix:
                return (f"HVX-bound: the matrix task's operand packing/requant ({side / 1e3:.2f} us on the whole HVX "
                        f"pool) competes with the vector task for {self.target.hvx_contexts} HVX contexts")
        return ""


def _lower_bound(costs: list[TaskCost], target: Target) -> float:
    """No concurrent schedule beats the busiest resource with every task at full speed, nor a task op
    on its own HVX share; plus the expanded ops' dispatches and launches."""
    rate = min(target.dma_bytes_per_ns, target.ddr_bytes_per_ns)
    hmx = sum(c.main_ns for c in costs if c.main_lane == "hmx")
    dma = sum((c.ddr_in + c.ddr_out) / rate + (c.main_ns if c.main_lane == "dma" else 0.0) for c in costs)
    work = [c.hvx_side_ns + (c.main_ns if c.main_lane == "hvx" else 0.0) for c in costs]
    hvx = sum(work) / target.hvx_contexts
    task_ops = max((w / fused_contexts(c, target) for c, w in zip(costs, work) if fused_contexts(c, target)), default=0.0)
    ops = sum(c.dispatches if c.engine == "matrix" else 1 for c in costs)
    launches = sum(c.hvx_ops if c.engine == "matrix" else 1 for c in costs)
    return max(hmx, dma, hvx, task_ops) + target.dispatch_ns * ops + target.hvx_launch_ns * launches


def _package_cost(package: float, t2: float, t4: float, margin: float) -> str:
    """The reason where the group would pass the margin but for what holding it together adds (it decides,
    so it comes before what _why_not describes)."""
    if package <= 0 or 1.0 - (t4 - package) / t2 < margin:
        return ""
    return (f"{PACKAGE_REASON} {package / 1e3:.2f} us (the package's entry and joins, their "
            f"ports in main memory, QNN's copies for them); with it fused {_saves(1.0 - t4 / t2)}, without it "
            f"{_saves(1.0 - (t4 - package) / t2)}, margin {margin:.0%} (--as-designed prices the design's single VTCM entry)")


def _saves(gain: float) -> str:
    """'saves 13.9%', or 'costs 357.6% more' where the fused node would be slower (never 'saves -357.6%')."""
    return f"saves {gain:.1%}" if gain >= 0 else f"costs {-gain:.1%} more"


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "all"


def baseline_details(base: Baselines, costs: list[TaskCost]) -> dict[str, float]:
    details = {
        "t1_serial": round(base.t1_serial, 1), "t2_best_existing": round(base.t2_best_existing, 1),
        "t3_fused_serial": round(base.t3_fused_serial, 1), "t4_fused_concurrent": round(base.t4_fused_concurrent, 1),
        "entry_merge_gain": round(base.entry_merge_gain, 4), "overlap_gain": round(base.overlap_gain, 4),
        "gain_vs_serial": round(1.0 - base.t4_fused_concurrent / base.t1_serial, 4) if base.t1_serial else 0.0,
        "quota.candidates": float(base.choice.tried),
        # what prices the per-op estimates: t2 - t4 = engine time + dispatch_ns x ops saved + hvx_launch_ns x launches saved
        "ops_serial": float(base.ops_serial), "ops_fused": float(base.ops_fused),
        "hvx_launches_serial": float(base.launches_serial), "hvx_launches_fused": float(base.launches_fused),
        "dispatch_ns": base.dispatch_ns, "hvx_launch_ns": base.hvx_launch_ns,
        "saved_ns": round(base.saved_ns, 1), "saved_by_dispatch_ns": round(base.dispatch_saved_ns, 1),
        "saved_by_hvx_launch_ns": round(base.launch_saved_ns, 1), "vtcm_ordered": float(base.vtcm_ordered),
        "package_ns": round(base.package_ns, 1),
    }
    for i, plan in enumerate(base.choice.plans):  # tasks by position in the group
        details[f"quota.task{i}.hvx_contexts"] = float(plan.hvx_contexts)
        details[f"quota.task{i}.vtcm_mb"] = round(plan.vtcm_bytes / 2**20, 3)
        details[f"quota.task{i}.tiles"] = float(plan.tiles)
    return details
