"""Why each node stays per request, in the user's terms, from the planner's first reasons.

The planner knows a node's immediate reason ("no counterpart"); the user wants the cause. Three rules:

  - ops that couple rows by their nature say so: a MatMul of two activations (attention scores and their
    weighted sum over the request's own keys), a Softmax over keys, a Concat onto the KV cache;
  - a node without counterparts that reads a node kept per request follows it: it gives the cause of
    the first node of that line (the Reshape into heads by the request's own token count);
  - every other reason stands as the planner gave it.
"""

from __future__ import annotations

from hexfuse.graph_passes.combine.plan import Plan

def _nature(plan: Plan, node_index: int) -> str | None:
    view = plan.view
    node = view.nodes[node_index]
    live = [t for t in node.input if t and t not in view.constant]
    if node.op_type == "MatMul" and len(live) == 2:
        return "attention: a MatMul of two activations couples the request's rows (scores, or their weighted sum)"
    if node.op_type in ("Softmax", "LogSoftmax"):
        return "attention: Softmax over the request's own keys"
    if node.op_type == "Concat" and any(t in view.graph_inputs for t in live):
        return "the request's KV cache: a Concat onto a cache the request brings"
    return None


def explain(plan: Plan) -> dict[int, str]:
    view = plan.view
    reasons = dict(plan.apart)
    root: dict[int, int] = {}  # follower -> the node whose cause it shares
    for index in sorted(reasons):  # producers first: the sorted graph's order
        nature = _nature(plan, index)
        if nature is not None:
            reasons[index] = nature
            continue
        if index in plan.counterparts.tuple_of:
            continue  # it has counterparts: the planner's reason is its own
        node = view.nodes[index]
        source = next((view.producer[t] for t in node.input if t in view.producer and view.producer[t] in reasons), None)
        if source is None:
            continue
        root[index] = root.get(source, source)
    for index, cause in root.items():
        reasons[index] = f"follows a {view.nodes[cause].op_type} kept per request: {reasons[cause]}"
    return reasons
