"""Predict the time of a fused group: tasks cut into tiles, engines as single-server lanes.

Each task runs a pipeline of stages per tile; each stage occupies one lane:

    tile k:  dma_in ─> pack ─> compute ─> requant ─> dma_out
             [dma]     [hvx:T]  [hmx|hvx:T|dma] [hvx:T] [dma]

    lanes    hmx   one HMX engine, shared by all tasks
             dma   one DMA queue = the group's DDR share (min(DMA rate, NPU share of DDR));
                   every DDR byte crosses it, so two DDR-heavy tasks serialise here
             hvx:T HVX contexts given to task T by the quota (a lane of speed = its context count)

    concurrent (baseline 4), two tasks, double-buffered tiles:
        hmx    |m0 m1 m2 m3 ........|
        hvx:M  |p0 p1 r0 p2 r1 ...  |   matrix side work (packing/requant)
        hvx:V  |v0 v1 v2 v3 ...     |   vector task
        dma    |w0 w1 w2 . o0 o1 .  |   weights in, spilled outputs out

Rules: a stage waits for the previous stage of its tile and for the same stage of the previous tile
(in-order per stage); with double buffering, tile k's first stage waits until tile k-2 has left the
pipeline (single buffering: k-1).  The next micro-op started is the ready one with the earliest
feasible start (list scheduling).  Every micro-op pays ``launch_ns``.  Tasks with more tiles than
``TILE_CAP`` are simulated as ``TILE_CAP`` macro-tiles, still paying launch overhead for every real
tile, which keeps one simulation O(tasks x stages x TILE_CAP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hexfuse.graph_passes.cost.opcost import TaskCost
from hexfuse.graph_passes.cost.target import Target

TILE_CAP = 12
BASE_TILES = 4  # a kernel cuts its work at least this finely to pipeline DMA and compute


@dataclass(frozen=True)
class Stage:
    kind: str  # dma_in | pack | compute | requant | dma_out
    lane: str  # hmx | dma | hvx:<task id>
    ns: float  # per (macro-)tile, launch overhead included


@dataclass(frozen=True)
class TaskPlan:
    """One task under one quota: how it is cut and what each tile's stages cost."""

    task_id: str
    hvx_contexts: int
    vtcm_bytes: float
    tiles: int  # real tile count
    buffers: int  # 2 = double-buffered, 1 = single
    stages: tuple[Stage, ...]
    sim_tiles: int  # macro-tiles simulated


@dataclass(frozen=True)
class Slot:
    task_id: str
    tile: int
    kind: str
    lane: str
    start: float
    end: float


@dataclass(frozen=True)
class Schedule:
    makespan: float
    slots: tuple[Slot, ...]
    busy: dict[str, float]  # lane -> busy ns


class Infeasible(Exception):
    """The quota cannot run this task (no HVX context for HVX work, VTCM too small for one tile)."""


def tiles_for(cost: TaskCost, vtcm_quota: float) -> tuple[int, int]:
    """(tiles, buffers) so that the tiles' working set fits ``vtcm_quota``."""
    if cost.vtcm_bytes <= 0:
        return 1, 1
    finest = max(1.0, cost.vtcm_bytes / max(cost.min_tile_bytes, 1.0))
    for buffers in (2, 1):
        if buffers * cost.min_tile_bytes <= vtcm_quota:
            needed = math.ceil(buffers * cost.vtcm_bytes / vtcm_quota)
            tiles = max(needed, min(BASE_TILES, int(finest)))
            return max(1, tiles), buffers
    raise Infeasible(f"task {cost.task_id}: one tile needs {cost.min_tile_bytes / 2**20:.2f} MB of VTCM, "
                     f"quota {vtcm_quota / 2**20:.2f} MB")


def plan_task(cost: TaskCost, target: Target, hvx_contexts: int, vtcm_quota: float, launch_ns: float) -> TaskPlan:
    tiles, buffers = tiles_for(cost, vtcm_quota)
    sim_tiles = min(tiles, TILE_CAP)
    launch = launch_ns * tiles / sim_tiles  # every real tile's micro-op pays its launch/wait
    ddr_rate = min(target.dma_bytes_per_ns, target.ddr_bytes_per_ns)
    hvx_lane = f"hvx:{cost.task_id}"
    needs_hvx = cost.hvx_side_ns > 0 or cost.main_lane == "hvx"
    if needs_hvx and hvx_contexts < 1:
        raise Infeasible(f"task {cost.task_id} needs HVX but its quota has no context")
    ctx = max(hvx_contexts, 1)
    main_lane = hvx_lane if cost.main_lane == "hvx" else cost.main_lane
    main_ns = cost.main_ns / ctx if cost.main_lane == "hvx" else cost.main_ns
    raw = (
        ("dma_in", "dma", cost.ddr_in / ddr_rate),
        ("pack", hvx_lane, cost.pack_ns / ctx),
        ("compute", main_lane, main_ns),
        ("requant", hvx_lane, cost.requant_ns / ctx),
        ("dma_out", "dma", cost.ddr_out / ddr_rate),
    )
    stages = tuple(Stage(kind, lane, ns / sim_tiles + launch) for kind, lane, ns in raw if ns > 0)
    if not stages:
        stages = (Stage("compute", main_lane, launch),)
    return TaskPlan(cost.task_id, hvx_contexts if needs_hvx else 0, vtcm_quota, tiles, buffers, stages, sim_tiles)


def simulate(plans: list[TaskPlan]) -> Schedule:
    """List-schedule every (task, tile, stage) micro-op on its lane; see the module docstring."""
    lane_free: dict[str, float] = {}
    busy: dict[str, float] = {}
    # per task: next tile index per stage, end time of each (tile, stage)
    next_tile = [[0] * len(p.stages) for p in plans]
    ends = [[[0.0] * len(p.stages) for _ in range(p.sim_tiles)] for p in plans]
    slots: list[Slot] = []
    remaining = sum(p.sim_tiles * len(p.stages) for p in plans)
    while remaining:
        best = None
        for t, plan in enumerate(plans):
            last = len(plan.stages) - 1
            for s, stage in enumerate(plan.stages):
                k = next_tile[t][s]
                if k >= plan.sim_tiles:
                    continue
                if s > 0 and next_tile[t][s - 1] <= k:
                    continue  # previous stage of this tile not scheduled yet
                ready = ends[t][k][s - 1] if s > 0 else 0.0
                if k > 0:
                    ready = max(ready, ends[t][k - 1][s])
                if s == 0 and k >= plan.buffers:
                    if next_tile[t][last] <= k - plan.buffers:
                        continue  # buffer of tile k - buffers not released yet
                    ready = max(ready, ends[t][k - plan.buffers][last])
                start = max(ready, lane_free.get(stage.lane, 0.0))
                if best is None or start < best[0]:
                    best = (start, t, s, k)
        start, t, s, k = best
        stage = plans[t].stages[s]
        end = start + stage.ns
        ends[t][k][s] = end
        next_tile[t][s] = k + 1
        lane_free[stage.lane] = end
        busy[stage.lane] = busy.get(stage.lane, 0.0) + stage.ns
        slots.append(Slot(plans[t].task_id, k, stage.kind, stage.lane, start, end))
        remaining -= 1
    makespan = max((slot.end for slot in slots), default=0.0)
    return Schedule(makespan, tuple(slots), busy)


def run_serial(plans: list[TaskPlan]) -> Schedule:
    """Tasks one after another (each internally pipelined): the barrier-mode fused entry."""
    offset = 0.0
    slots: list[Slot] = []
    busy: dict[str, float] = {}
    for plan in plans:
        alone = simulate([plan])
        slots += [Slot(s.task_id, s.tile, s.kind, s.lane, s.start + offset, s.end + offset) for s in alone.slots]
        for lane, ns in alone.busy.items():
            busy[lane] = busy.get(lane, 0.0) + ns
        offset += alone.makespan
    return Schedule(offset, tuple(slots), busy)
