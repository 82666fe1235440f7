"""Per-engine timeline from a per-node profile: busy time, idle fractions, and idle time during which
ready work of that engine waited behind an op boundary ("locate the limit")."""
from __future__ import annotations

import onnx

from hexfuse.graph_passes.cost import profile_rows as pr

from .models import FUSED_DOMAIN, node_key


def _deps(model: onnx.ModelProto) -> tuple[dict[str, int], dict[int, set[int]], list[onnx.NodeProto]]:
    """Name -> node index, and for each node the nodes it reads from (top-level graph)."""
    nodes = list(model.graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    lookup: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for k in node_key(n, i):
            lookup.setdefault(k, i)
    preds = {i: {producer[t] for t in n.input if t in producer} for i, n in enumerate(nodes)}
    return lookup, preds, nodes


def _timeline_preds(idx: list[int | None], preds: dict[int, set[int]],
                    opaque: set[int]) -> list[set[int] | None]:
    """Predecessors among the profiled events, seen through nodes the profile lacks (folded constants,
    Q/DQ absorbed in a node unit). A path through an unprofiled fused node (ORT inlined it, so its body
    ran under other names) makes the predecessors unknown: None."""
    pos = {g: e for e, g in enumerate(idx) if g is not None}
    memo: dict[int, set[int] | None] = {}

    def reach(g: int) -> set[int] | None:
        if g in memo:
            return memo[g]
        memo[g] = set()
        out: set[int] | None = set()
        stack = list(preds.get(g, ()))
        seen: set[int] = set()
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            if p in pos:
                out.add(pos[p])
            elif p in opaque:
                out = None
                break
            else:
                stack.extend(preds.get(p, ()))
        memo[g] = out
        return out

    return [reach(g) if g is not None else None for g in idx]


def _merge(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(x for x in iv if x[1] > x[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _minus_len(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of union(a) minus union(b)."""
    total = 0.0
    for s, e in _merge(a):
        cut = e - s
        for bs, be in _merge(b):
            cut -= max(0.0, min(e, be) - max(s, bs))
        total += max(0.0, cut)
    return total


def build(profile_nodes: list[dict], model: onnx.ModelProto | None, unit: str) -> dict:
    """profile_nodes: dicts with name, op_type, duration, optional start (None = back to back)."""
    lookup, preds, onnx_nodes = _deps(model) if model is not None else ({}, {}, [])
    # nodes of inlined fused functions: their engine is known, their inputs are not (see _timeline_preds)
    body_ops = {n.name: (n.op_type, n.domain) for f in model.functions for n in f.node if n.name} if model else {}
    events, idx = [], []
    t = 0.0
    for n in profile_nodes:
        g = pr.match_node(n["name"], lookup)  # QDQ rows carry QNN's _token_<n> suffix
        if g is not None:
            op, engine = onnx_nodes[g].op_type, pr.engine_of_op(onnx_nodes[g].op_type, onnx_nodes[g].domain)
        elif (body := pr.node_key(n["name"], body_ops)) is not None:
            op, engine = body_ops[body][0], pr.engine_of_op(*body_ops[body])
        else:
            op = n.get("op_type") or pr.op_type_guess(n["name"])
            engine = pr.engine_of_op(op)
        start = n.get("start")
        start = t if start is None else float(start)
        dur = float(n["duration"])
        t = max(t, start + dur)
        events.append({"name": n["name"], "op_type": op, "engine": engine, "start": start, "dur": dur})
        idx.append(g)
    opaque = {i for i, n in enumerate(onnx_nodes) if n.domain == FUSED_DOMAIN}
    tp = _timeline_preds(idx, preds, opaque)
    for i, e in enumerate(events):  # QNN's graph-IO rows: input copy first, output copy after all
        if idx[i] is None and e["name"] in ("Input", "Output"):
            tp[i] = set() if e["name"] == "Input" else set(range(i))
    span = max((e["start"] + e["dur"] for e in events), default=0.0)
    lanes = sorted({e["engine"] for e in events} | set(pr.ENGINES))
    per_engine = {}
    for lane in lanes:
        mine = [i for i, e in enumerate(events) if e["engine"] == lane]
        busy_iv = [(events[i]["start"], events[i]["start"] + events[i]["dur"]) for i in mine]
        busy = sum(b - a for a, b in _merge(busy_iv))
        # A node was ready from the moment its last profiled predecessor ended until it started.
        wait_iv = []
        for i in mine:
            if tp[i] is None:
                continue  # unknown inputs (e.g. nodes ORT inlined from a function): no claim either way
            ready = max((events[p]["start"] + events[p]["dur"] for p in tp[i]), default=0.0)
            wait_iv.append((ready, events[i]["start"]))
        per_engine[lane] = {"ops": len(mine), "busy": busy, "idle": span - busy,
                            "idle_fraction": (span - busy) / span if span else 0.0,
                            "idle_while_ready_work_waited": _minus_len(wait_iv, busy_iv)}
    ideal = _ideal_span(events, tp)
    return {"unit": unit, "span": span, "serial_sum": sum(e["dur"] for e in events), "events": events,
            "per_engine": per_engine, "ideal_engine_parallel_span": ideal,
            "max_overlap_gain": (span / ideal) if ideal else None,
            "events_with_known_inputs": sum(p is not None for p in tp)}


def _ideal_span(events: list[dict], tp: list[set[int]]) -> float:
    """List schedule with one lane per engine, profile order as priority: the overlap bound if
    engines were independent (no bandwidth contention, no VTCM ordering edges)."""
    free: dict[str, float] = {}
    end = [0.0] * len(events)
    for i, e in enumerate(events):
        # unknown predecessors: keep the measured start as the earliest possible one
        deps = [e["start"]] if tp[i] is None else [end[p] for p in tp[i] if p < i]
        s = max([free.get(e["engine"], 0.0)] + deps)
        end[i] = s + e["dur"]
        free[e["engine"]] = end[i]
    return max(end, default=0.0)


def trace_events(timelines: dict[str, dict]) -> dict:
    """Chrome/Perfetto trace: one process per model, one thread per engine."""
    out: list[dict] = []
    for pid, (model_name, tl) in enumerate(timelines.items(), start=1):
        out.append({"ph": "M", "pid": pid, "name": "process_name",
                    "args": {"name": f"{model_name} ({tl['unit']}; 1 trace us = 1 {tl['unit']})"}})
        lanes = list(tl["per_engine"])
        for tid, lane in enumerate(lanes, start=1):
            out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": lane}})
        for e in tl["events"]:
            out.append({"ph": "X", "pid": pid, "tid": lanes.index(e["engine"]) + 1, "name": e["name"],
                        "cat": e["engine"], "ts": e["start"], "dur": max(e["dur"], 0.001),
                        "args": {"op_type": e["op_type"]}})
    return {"traceEvents": out, "displayTimeUnit": "ns"}
