"""Where the tasks of a fused group came from: branches of one graph, micro-batches, or requests.

    request      the tasks belong to different requests: models joined by ``hexfuse merge`` (metadata
                 ``hexfuse.requests`` maps node-name prefixes to request names) or, in a model without
                 that metadata, parts of the graph that share nothing but weights (weakly connected
                 components over non-constant tensors, e.g. a prefill and a decode built into one graph)
    micro-batch  the tasks belong to different slices of a model split by ``--micro-batches``
                 (metadata ``hexfuse.micro_batches``, node-name prefix ``mb<k>/``)
    branch       otherwise: independent branches of one request and one micro-batch

A task is labelled by the node that decides the engine of its first unit; the passes that create
requests and micro-batches never let one task span two of them (they share no node but the Split and
Concat at the edges of a split model, which are tasks of their own).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import onnx

from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.analysis.tasks import Task
from hexfuse.graph_passes.graph.flat import FlatGraph

BRANCH, MICRO_BATCH, REQUEST = "branch", "micro-batch", "request"
SOURCES = (BRANCH, MICRO_BATCH, REQUEST)
REQUESTS_KEY = "hexfuse.requests"  # JSON [[name, prefix], ...], written by graph_passes.merge.requests
MICRO_BATCHES_KEY = "hexfuse.micro_batches"  # JSON {"count": N, ...}, written by graph_passes.microbatch
_MICRO_BATCH = re.compile(r"mb(\d+)/")


@dataclass(frozen=True)
class Part:
    request: str  # request name; "" where the model holds one request
    micro_batch: int | None  # slice index in a split model, else None


def _metadata(model: onnx.ModelProto, key: str):
    for entry in model.metadata_props:
        if entry.key == key:
            try:
                return json.loads(entry.value)
            except (json.JSONDecodeError, RecursionError):
                return None
    return None


def _components(flat: FlatGraph) -> list[str]:
    """Per node: the first graph input of its weakly connected component over non-constant tensors
    ("" for nodes computed from constants alone; "" for all where one input feeds the whole graph)."""
    if sum(1 for t in flat.graph_inputs if not flat.static[t]) <= 1:
        return [""] * flat.node_count  # every component reaches the one input: a single request
    parent = list(range(flat.node_count))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    constant = bytearray(flat.static)
    reader_of_input: dict[int, int] = {}
    producer = flat.producer
    for index, ins in enumerate(flat.inputs):
        live = [t for t in ins if t >= 0 and not constant[t]]
        if (ins and not live) or flat.op_types[index] == "Constant":
            for tensor in flat.outputs[index]:
                if tensor >= 0:
                    constant[tensor] = 1
            continue
        for tensor in live:
            other = producer[tensor]
            if other < 0:  # a graph input: its readers meet at its first reader
                other = reader_of_input.setdefault(tensor, index)
            parent[find(index)] = find(other)
    first_input: dict[int, str] = {}
    for info in flat.model.graph.input:
        tensor = flat.ids[info.name]
        if tensor in reader_of_input:
            first_input.setdefault(find(reader_of_input[tensor]), info.name)
    return [first_input.get(find(i), "") for i in range(flat.node_count)]


def request_prefixes(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(request name, node-name prefix) per request ``hexfuse merge`` recorded; the metadata is the
    file's, so only well-formed entries count."""
    requests = _metadata(model, REQUESTS_KEY)
    return [(pair[0], pair[1]) for pair in (requests if isinstance(requests, list) else [])
            if isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, str) and v for v in pair)]


class Sources:
    def __init__(self, model: onnx.ModelProto, analysis: Analysis) -> None:
        self.analysis = analysis
        self.prefixes: list[tuple[str, str]] = request_prefixes(model)
        micro = _metadata(model, MICRO_BATCHES_KEY)
        count = micro.get("count", 0) if isinstance(micro, dict) else 0
        self.micro_batches = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0
        self._components: list[str] | None = None

    def node_part(self, index: int) -> Part:
        name = self.analysis.flat.node_names[index]
        micro_batch = None
        match = _MICRO_BATCH.match(name) if self.micro_batches else None
        if match and int(match.group(1)) < self.micro_batches:
            micro_batch, name = int(match.group(1)), name[match.end():]
        if self.prefixes:
            request = next((label for label, prefix in self.prefixes if name.startswith(prefix)), "")
        else:
            if self._components is None:
                self._components = _components(self.analysis.flat)
            request = self._components[index]
        return Part(request, micro_batch)

    def task_part(self, task: Task) -> Part:
        return self.node_part(self.analysis.units.core[task.units[0]])

    def kind(self, tasks: tuple[Task, ...]) -> str:
        parts = [self.task_part(task) for task in tasks]
        if len({p.request for p in parts if p.request}) > 1:
            return REQUEST
        if len({p.micro_batch for p in parts if p.micro_batch is not None}) > 1:
            return MICRO_BATCH
        return BRANCH

    def describe(self, tasks: tuple[Task, ...]) -> str:
        """``request: prefill + decode``, ``micro-batch: mb1 + mb0`` or ``branch``."""
        kind = self.kind(tasks)
        parts = [self.task_part(task) for task in tasks]
        if kind == REQUEST:
            return f"{kind}: " + " + ".join(p.request for p in parts)
        if kind == MICRO_BATCH:
            return f"{kind}: " + " + ".join("-" if p.micro_batch is None else f"mb{p.micro_batch}" for p in parts)
        return kind
