"""Prove a fused model computes what the original computed, before ``hexfuse fuse`` writes it.

    1 structure   every fused node, its op type's function body inlined with its own tensors, is
                  node for node the group it replaced (op, attributes, wiring); every other node of the
                  edited model is in the fused model unchanged; every DQ copy equals its source
    2 numbers     the fused model as ONNX defines it (functions expanded by onnx's reference inliner)
                  runs on ONNX Runtime (CPU EP, optimizations off: the cheapest session, and the one
                  that executes the nodes as written) as far as the first fused node of every op type,
                  every node those depend on (whole where 3 compares its outputs); their inputs and
                  outputs are read out of that run, and the op type's original nodes, run on those
                  inputs in a model of their own, must give those outputs
    3 the file    where the opset upgrade or a micro-batch split edited the model, the original file
                  runs too, at the same level and on the same inputs (--fix-dim pins included), and every
                  output of the fused model must equal it (the edit is checked, not trusted)

1 covers every fused node, 2 covers every distinct function once on real values; together they say
each fused node computes its group, and nothing else changed. Any failure is one line naming what
differed. ONNX Runtime's own expansion of the functions is not exercised here: at 3e4 nodes it costs
more than the whole pass and the run together (onnx.inliner: a tenth of that); the tests run fused
models on ONNX Runtime directly.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.inliner

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.graph.subgraphs import node_reads
from hexfuse.graph_passes.load.weights import without_weights
from hexfuse.graph_passes.rewrite.ort_check import OutputDiff, diff, random_inputs, run
from hexfuse.graph_passes.spec.model import FUSED_DOMAIN

LEVEL = "none"  # ORT_DISABLE_ALL


@dataclass(frozen=True)
class Verification:
    fused_nodes: int  # proven to be their group, structurally
    op_types: int  # distinct functions recomputed from their original nodes
    diffs: tuple[OutputDiff, ...]  # per compared tensor
    against_file: bool  # the original file ran too (the model was upgraded or split)
    seed: int
    seconds: float

    @property
    def equal(self) -> bool:
        return all(d.equal for d in self.diffs)

    @property
    def worst(self) -> OutputDiff | None:
        return max(self.diffs, key=lambda d: d.max_rel, default=None)

    def as_dict(self) -> dict:
        worst = self.worst
        return {"fused_nodes": self.fused_nodes, "op_types": self.op_types, "tensors_compared": len(self.diffs),
                "max_rel_error": worst.max_rel if worst else 0.0, "worst_tensor": worst.name if worst else None,
                "against_file": self.against_file, "seed": self.seed, "text": self.describe()}

    def describe(self) -> str:
        """What was verified how, for the report."""
        worst = self.worst
        error = f"largest relative difference {worst.max_rel:.2g} ({worst.name!r})" if worst else "nothing to compare"
        lines = [
            f"- structure: all {self.fused_nodes} fused nodes are their op type's function body with their own "
            "tensors, node for node the groups they replaced; every other node is unchanged",
            f"- numbers: the fused model, its functions expanded by onnx's reference inliner, ran "
            f"{'whole' if self.against_file else 'as far as the first fused node of each op type'} on ONNX Runtime "
            f"(CPU EP, graph optimizations off, seeded inputs, seed {self.seed}); each of the {self.op_types} op types' "
            f"original nodes, run on the inputs its first fused node saw there, gave the outputs that node gave: "
            f"{len(self.diffs)} tensors, {error}",
        ]
        if self.against_file:
            lines.append("- the file: the opset upgrade or a micro-batch split edited the model, so the original file "
                         "ran too and every output of the fused model was compared with it")
        return "\n".join(lines)


def _attributes(node: onnx.NodeProto) -> list[bytes]:
    return [a.SerializeToString() for a in node.attribute]


def _check_call(call: onnx.NodeProto, function: onnx.FunctionProto, originals: list[onnx.NodeProto]) -> str | None:
    """Why inlining ``function`` at ``call`` does not give back ``originals`` node for node, or None."""
    if len(function.input) != len(call.input) or len(function.output) != len(call.output):
        return "its inputs or outputs do not match its function's"
    if len(function.node) != len(originals):
        return f"its function has {len(function.node)} nodes, the group {len(originals)}"
    actual = dict(zip(function.input, call.input))
    actual.update(zip(function.output, call.output))
    formal = set(actual)
    internal: dict[str, str] = {}
    for body, original in zip(function.node, originals):
        if (body.op_type, body.domain) != (original.op_type, original.domain) or _attributes(body) != _attributes(original):
            return f"{original.op_type} {original.name!r} differs from its function's node"
        for mine, theirs in ((body.input, original.input), (body.output, original.output)):
            if len(mine) != len(theirs):
                return f"{original.op_type} {original.name!r} has another arity than its function's node"
            for name, want in zip(mine, theirs):
                got = actual[name] if name in formal else internal.setdefault(name, want) if name else ""
                if got != want:
                    return f"{original.op_type} {original.name!r} reads or writes {got!r} where the group has {want!r}"
    if len(set(internal.values())) != len(internal):
        return "two tensors of its function map to one tensor of the group"
    return None


def check_structure(prepared: onnx.ModelProto, fused: onnx.ModelProto, replaced: dict[str, list[int]],
                    copies: dict[int, int]) -> None:
    """Step 1 of the module docstring. ``replaced``: fused node name -> indices of the prepared model's
    nodes it replaced, in function-body order; ``copies``: DQ copy index -> the node it copies."""
    nodes = list(prepared.graph.node)
    functions = {(f.domain, f.name): f for f in fused.functions}
    kept: Counter[bytes] = Counter()
    seen = set()
    for node in fused.graph.node:
        if node.domain != FUSED_DOMAIN:
            kept[node.SerializeToString()] += 1
            continue
        function = functions.get((node.domain, node.op_type))
        if function is None or node.name not in replaced:
            raise HexfuseError(f"verification failed: fused node {node.name!r} has no function or no group")
        problem = _check_call(node, function, [nodes[i] for i in replaced[node.name]])
        if problem:
            raise HexfuseError(f"verification failed: fused node {node.name!r}: {problem}")
        seen.add(node.name)
    if seen != set(replaced):
        raise HexfuseError(f"verification failed: {len(set(replaced) - seen)} fused groups have no fused node")
    inside = {i for indices in replaced.values() for i in indices}
    expected = Counter(node.SerializeToString() for i, node in enumerate(nodes) if i not in inside)
    if kept != expected:
        raise HexfuseError("verification failed: the nodes left unfused differ from the original's")
    for copy, source in copies.items():
        a, b = nodes[copy], nodes[source]
        if (a.op_type, list(a.input), _attributes(a)) != (b.op_type, list(b.input), _attributes(b)):
            raise HexfuseError(f"verification failed: DequantizeLinear copy {a.name!r} differs from {b.name!r}")


TypeOf = Callable[[str], "onnx.ValueInfoProto | None"]


def _value_info(name: str, types: TypeOf) -> onnx.ValueInfoProto:
    return types(name) or onnx.helper.make_empty_tensor_value_info(name)


def _computing(model: onnx.ModelProto, names: list[str], types: TypeOf, whole: bool) -> bytes:
    """The model (changed in place) with the tensors ``names`` as graph outputs, typed where the pass knows
    the type, serialized. Unless ``whole``, it keeps only the nodes they depend on, the inputs and
    initializers those read, and no other output: ONNX Runtime runs every node of a session, whatever is
    fetched (a 3B prefill layer fused as designed: 1.35 s whole, 0.55 s up to what its fused nodes give)."""
    graph = model.graph
    if not whole:
        nodes = list(graph.node)  # (indexing the repeated field builds a wrapper per access)
        kept, needed = _depended_on(nodes, names)
        _replace(graph.node, [nodes[index] for index in sorted(kept)])
        _replace(graph.input, [info for info in graph.input if info.name in needed])
        _replace(graph.initializer, [tensor for tensor in graph.initializer if tensor.name in needed])
        _replace(graph.sparse_initializer, [tensor for tensor in graph.sparse_initializer if tensor.values.name in needed])
        _replace(graph.value_info, [info for info in graph.value_info if info.name in needed])
        del graph.output[:]
    present = {o.name for o in graph.output}
    for name in names:
        if name not in present:
            present.add(name)
            graph.output.append(_value_info(name, types))
    return model.SerializeToString()


def _depended_on(nodes: list[onnx.NodeProto], names: list[str]) -> tuple[set[int], set[str]]:
    """(the positions in ``nodes`` of those computing the tensors ``names``, directly or through others; every
    tensor they read, and ``names``), subgraphs' reads of outer tensors included."""
    producer = {out: index for index, node in enumerate(nodes) for out in node.output if out}
    kept: set[int] = set()
    needed: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        index = producer.get(name)
        if index is not None and index not in kept:
            kept.add(index)
            stack.extend(read for read in node_reads(nodes[index]) if read)
    return kept, needed


def _replace(field, items: list) -> None:
    """A repeated protobuf field given these of its own items, in this order (cleared, then refilled)."""
    if len(items) != len(field):
        del field[:]
        field.extend(items)


def _original_nodes_model(prepared: onnx.ModelProto, bodies: list[list[int]], outputs: list[str],
                          values: dict[str, np.ndarray], types: TypeOf) -> tuple[bytes, dict[str, np.ndarray]]:
    """A model of the given original nodes alone: initializers they read are copied, every other tensor
    they read from outside is a graph input fed from ``values``."""
    graph = prepared.graph
    nodes = [graph.node[i] for body in bodies for i in body]
    produced = {name for node in nodes for name in node.output if name}
    initializers = {init.name: init for init in graph.initializer}
    reads = list(dict.fromkeys(name for node in nodes for name in node.input if name and name not in produced))
    overridable = {info.name for info in graph.input}
    feeds = {name: values[name] for name in reads if name not in initializers or name in overridable}
    inputs = [onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
              for name, value in feeds.items()]
    model = onnx.helper.make_model(
        onnx.helper.make_graph(nodes, "hexfuse_verify", inputs,
                               [_value_info(name, types) for name in outputs],
                               [initializers[name] for name in reads if name in initializers and name not in feeds]),
        opset_imports=[o for o in prepared.opset_import if o.domain != FUSED_DOMAIN], ir_version=prepared.ir_version)
    return model.SerializeToString(), feeds


def verify(original_raw: bytes, prepared: onnx.ModelProto, fused_bytes: bytes, representatives: list[str],
           replaced: dict[str, list[int]], copies: dict[int, int], types: TypeOf,
           against_file: bool, seed: int = 0) -> Verification:
    """Steps 1-3 of the module docstring (3 with ``against_file``). ``prepared``: the model the fused
    model was made from; ``representatives``: the first fused node of each op type;
    ``types``: a tensor's value_info where the pass knows its type, else None. Raises HexfuseError
    only where a model cannot be loaded or run; differences are in the result's ``diffs``."""
    start = time.process_time()
    fused = onnx.load_model_from_string(fused_bytes)
    check_structure(prepared, fused, replaced, copies)
    calls = {node.name: node for node in fused.graph.node if node.domain == FUSED_DOMAIN}
    initializers = {init.name for init in prepared.graph.initializer} - {info.name for info in prepared.graph.input}
    feeds = random_inputs(prepared, seed)  # the file's inputs, with the dims --fix-dim pinned
    watched = [name for rep in representatives for name in (*calls[rep].input, *calls[rep].output)
               if name and name not in initializers and name not in feeds]
    expanded = (without_weights(fused, len(fused_bytes), onnx.inliner.inline_local_functions)
                or onnx.inliner.inline_local_functions(fused))
    whole = against_file or not watched  # step 3 compares every output of the fused model
    values = run(_computing(expanded, watched, types, whole), feeds, LEVEL, "the fused model")
    values.update(feeds)
    outputs = [name for rep in representatives for name in calls[rep].output]
    recomputed = {}
    if outputs:  # a micro-batch split may change the model without fusing any group: nothing to recompute
        check_model, check_feeds = _original_nodes_model(prepared, [replaced[rep] for rep in representatives], outputs,
                                                         values, types)
        recomputed = run(check_model, check_feeds, LEVEL, "the original nodes of the fused groups")
    diffs = [diff(name, recomputed[name], values[name]) for name in outputs]
    if against_file:
        # at the fused model's level: ORT's optimizations (Conv+BN folding, QDQ to QLinear ops) round differently
        expected = run(original_raw, feeds, LEVEL, "the original model")
        diffs += [diff(name, want, values[name]) for name, want in expected.items() if name in values]
    return Verification(len(calls), len(representatives), tuple(diffs), against_file, seed,
                        time.process_time() - start)
