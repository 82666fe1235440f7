"""``combine_requests``: plan, price, rewrite and verify in one call (what ``hexfuse combine`` runs).

    merged.onnx ─ load ─ [requantize] ─ view ─ plan ─ price ─ choose ─ rewrite ─ verify ─> combined model
                                                                        │
                                        chains whose rewrite would order two requests in a cycle are dropped
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from hexfuse.graph_passes.combine.plan import Plan, plan_combine
from hexfuse.graph_passes.combine.price import MATRIX, Priced, price_chain
from hexfuse.graph_passes.combine.requantize import Requantized, requantize
from hexfuse.graph_passes.combine.rewrite import boundary_ops, combine_model
from hexfuse.graph_passes.combine.schedule import Replayed, replayed
from hexfuse.graph_passes.combine.verify import Verification, require, verify_combined
from hexfuse.graph_passes.combine.view import RequestView, request_view
from hexfuse.graph_passes.cost.target import Target, load_target
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.model import LoadedModel, load_model
from hexfuse.graph_passes.load.toposort import CycleError

DEFAULT_TARGET = "sm8650"
NO_WEIGHTS = ("no matrix op on a weight in it: nothing is read once, and the launches it saves are priced with "
              "per-op constants fitted on vision models (--all combines it anyway)")


@dataclass
class Combined:
    loaded: LoadedModel
    target: Target
    view: RequestView  # the requests of ``reference``
    plan: Plan
    prices: list[Priced]  # per chain of the plan
    chosen: list[int]  # chains combined
    refused: dict[int, str]  # chain -> why it was not combined
    model: onnx.ModelProto  # the combined model (``reference`` where nothing is combined)
    reference: onnx.ModelProto  # the merged model, requantized where --requantize changed encodings
    requantized: list[Requantized] = field(default_factory=list)
    verification: Verification | None = None
    requantize_change: Verification | None = None  # the requantized merged model against the merged one
    seconds: dict[str, float] = field(default_factory=dict)
    replays: dict[str, Replayed | None] = field(default_factory=dict)  # "merged" / "combined" -> QNN's schedule replayed

    def find_replays(self, combined_path: Path, combined_bytes: bytes) -> None:
        """Both forms' cached schedules on the target, where ``hexfuse engines`` prepared them."""
        self.replays = {"merged": replayed(self.loaded.path, self.loaded.sha256, self.target),
                        "combined": replayed(combined_path, hashlib.sha256(combined_bytes).hexdigest(), self.target)}


def _choose(plan: Plan, prices: list[Priced], everything: bool) -> tuple[list[int], dict[int, str]]:
    chosen, refused = [], {}
    for index, (chain, priced) in enumerate(zip(plan.chains, prices)):
        if everything:
            chosen.append(index)
        elif not priced.weight_bytes_combined:
            refused[index] = NO_WEIGHTS
        elif not priced.pays:
            refused[index] = (f"estimated {priced.combined_ns / 1e3:.1f} us combined against {priced.apart_ns / 1e3:.1f} us "
                              "apart: the Concat/Split and padded rows cost more than reading the weights once saves")
        else:
            chosen.append(index)
    return chosen, refused


def _planned(view: RequestView, target: Target, everything: bool
             ) -> tuple[Plan, list[Priced], list[int], dict[int, str]]:
    """The plan, each chain priced, and the chains chosen (and why the others are not)."""
    plan = plan_combine(view)
    prices = [price_chain(plan, chain, target, boundary_ops(plan, i)) for i, chain in enumerate(plan.chains)]
    chosen, refused = _choose(plan, prices, everything)
    return plan, prices, chosen, refused


def _requantized(view: RequestView, target: Target, everything: bool) -> tuple[onnx.ModelProto, list[Requantized]]:
    """One encoding only where a chosen chain needs it: every corresponding tensor is requantized to find the
    chains, then only the chosen chains' tensors are. A tensor kept per request (attention's scores: a
    prefill's masked scores reach the mask's -100, a decode's over a full cache do not) keeps its own encoding
    instead of a step up to 10x coarser that buys nothing."""
    model, changes = requantize(view)
    if not changes:
        return model, changes
    plan, _, chosen, _ = _planned(request_view(model), target, everything)
    chains = [plan.chains[index] for index in chosen]
    needed = {member for chain in chains for number in chain.tuples for member in plan.counterparts.tuples[number]}
    # and the QuantizeLinear giving each entry: the chain's Concat takes the requests' rows in one encoding
    needed |= {plan.view.producer[t] for chain in chains for tensors in chain.entries for t in tensors
               if t in plan.view.producer}
    return requantize(view, needed)


def _rewrite(plan: Plan, chosen: list[int], refused: dict[int, str]) -> tuple[onnx.ModelProto, list[int]]:
    """The model with ``chosen`` combined; where that orders two requests in a cycle, chains are added
    one at a time and those that close a cycle are refused."""
    try:
        return combine_model(plan, chosen), chosen
    except CycleError:
        kept: list[int] = []
        for index in chosen:
            try:
                combine_model(plan, kept + [index])
                kept.append(index)
            except CycleError:
                refused[index] = "combined with the chains before it, it would order two requests in a cycle"
        return combine_model(plan, kept), kept


def combine_requests(path: str | Path, target: str | Path = DEFAULT_TARGET, requantized: bool = False,
                     everything: bool = False, verify: bool = True) -> Combined:
    seconds: dict[str, float] = {}
    mark = time.perf_counter()
    loaded = load_model(path)
    target_spec = load_target(target)
    merged = loaded.inferred
    view = request_view(merged)
    if view.count < 2:
        raise HexfuseError(f"{loaded.path}: holds one request; merge two or more (hexfuse merge A.onnx B.onnx ...) "
                           "or give a graph whose parts share nothing but weights")
    changes: list[Requantized] = []
    if requantized:
        merged, changes = _requantized(view, target_spec, everything)
        if changes:
            view = request_view(merged)
    seconds["load"] = time.perf_counter() - mark
    mark = time.perf_counter()
    plan, prices, chosen, refused = _planned(view, target_spec, everything)
    model, chosen = _rewrite(plan, chosen, refused) if chosen else (merged, [])
    seconds["plan"] = time.perf_counter() - mark
    result = Combined(loaded, target_spec, view, plan, prices, chosen, refused, model, merged, changes, seconds=seconds)
    if verify:
        mark = time.perf_counter()
        reference = merged.SerializeToString()
        result.verification = verify_combined(view, reference, model.SerializeToString())
        if changes:
            result.requantize_change = verify_combined(request_view(loaded.inferred), loaded.self_contained(), reference)
        seconds["verify"] = time.perf_counter() - mark
        require(result.verification)
    return result


def combine_hint(model: onnx.ModelProto, target: str | Path | Target = DEFAULT_TARGET) -> str | None:
    """One line for ``analyze`` and ``fuse`` on a model of several requests: what ``hexfuse combine``
    would run once for all of them (planned and priced, not rewritten or verified); None for one request."""
    view = request_view(model)
    if view.count < 2:
        return None
    plan, prices, chosen, _ = _planned(view, target if isinstance(target, Target) else load_target(target), False)
    if not chosen:
        return None
    matmuls = sum(1 for i in chosen for t in plan.chains[i].tuples
                  if view.nodes[plan.counterparts.tuples[t][0]].op_type in MATRIX)
    apart = sum(prices[i].weight_bytes_apart for i in chosen) / 2**20
    once = sum(prices[i].weight_bytes_combined for i in chosen) / 2**20
    return (f"requests {', '.join(view.names)} share weights: `hexfuse combine` would run {matmuls} matrix ops once "
            f"on the rows of all, reading {apart:.2f} -> {once:.2f} MiB of weights (docs/combine.md)")
