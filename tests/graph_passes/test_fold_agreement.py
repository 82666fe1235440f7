"""The op-type rules fold what QNN folds: every committed engine map agrees with the rule-based units.

Without an engine map (a user's own model, any target but sm8650's bundled models) the pass decides by
op-type rules plus the target's ``folds``. Where QNN runs an epilogue inside its matrix kernel
(``folded_into`` in a map), the rules must put it in that matrix node's unit; where the rules fold a
node into a matrix unit, QNN must run no op of its own for it. Exceptions are listed with the reason.

One test prepares probe models on the QNN EP's HTP simulator (onnxruntime-qnn, no SDK) to show that
each activation in ``folds.ACTIVATIONS`` is folded by QNN after Conv and after MatMul + bias, and that
Elu (left out of the list) is not.
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hexfuse
from hexfuse.graph_passes.cost import load_target
from hexfuse.graph_passes.cost.cli import scorer_for
from hexfuse.graph_passes.cost.target import FOLDS
from hexfuse.graph_passes.engines.engine_map import load_engine_map
from hexfuse.graph_passes.graph.folds import ACTIVATIONS, FOLDABLE, HOSTS
from hexfuse.graph_passes.pipeline import analyze_model

ROOT = Path(__file__).resolve().parents[2]
MAPS = sorted((ROOT / "models" / "engines").glob("*.json"))
_QDQ = ("QuantizeLinear", "DequantizeLinear")

# (model stem, node): what QNN folds that the rules deliberately do not, and why.
NOT_FOLDED_BY_RULES = {
    # QNN turns a Transpose feeding a MatMul into the MatMul's transpose flag. hexfuse keeps it a
    # move task: the fused op's matrix task hands QNN a MatMul, and the Transpose beside it is
    # cheap HVX work either way (docs/engines.md, "What the committed maps say").
    # QNN recognises the whole decomposed tanh-GELU after the MLP's first MatMul (bias Add, Pow, Mul x4,
    # Add x2, Tanh: all absent from the map) and runs it inside the HMX kernel, named after its last
    # node. The rules fold single activation nodes (folds.ACTIVATIONS: a Gelu node does fold), not a
    # ten-node pattern; the map, where there is one, prices that MLP right.
    ("gptj_block", "node_mul_8"): "decomposed tanh-GELU folded into the MatMul (a pattern, not one node)",
    ("llama_prefill_decode_qdq", "node_transpose_12"): "Transpose folded into a MatMul's transpose flag",
    ("llama_prefill_decode_qdq", "node_transpose_17"): "Transpose folded into a MatMul's transpose flag",
}


def _units(model: Path, target: str):
    """Rule-based analysis (no engine map) of ``model`` for ``target``: node name -> unit core's name."""
    result = analyze_model(model, scorer_for(load_target(target), 0.1, as_designed=True), None)
    analysis = result.analysis
    flat, units = analysis.flat, analysis.units
    core_of = {}
    for position, nodes in enumerate(units.nodes):
        core = flat.node(units.core[position]).name
        for index in nodes:
            core_of[flat.node(index).name] = core
    ops = {flat.node(i).name: flat.op_types[i] for i in range(flat.node_count)}
    return core_of, ops, analysis


def test_the_activation_fold_key_lists_the_pass_activations():
    assert FOLDS["activation"] == ACTIVATIONS
    assert set(ACTIVATIONS) <= FOLDABLE and "Elu" not in ACTIVATIONS


@pytest.mark.parametrize("map_path", MAPS, ids=[p.stem for p in MAPS])
def test_rule_based_folding_agrees_with_the_committed_map(map_path):
    engine_map = load_engine_map(map_path)
    stem = map_path.name.split(".")[0]
    core_of, ops, analysis = _units(ROOT / "models" / f"{stem}.onnx", engine_map.target)
    assert analysis.engine_map is None  # the rules alone decided
    disagreements = []
    for name, node in engine_map.nodes.items():
        if node.folded_into and core_of.get(name) != node.folded_into and (stem, name) not in NOT_FOLDED_BY_RULES:
            disagreements.append(f"QNN folds {ops.get(name)} {name} into {node.folded_into}; the rules do not")
    for name, core in core_of.items():
        if name == core or ops[name] in _QDQ or ops[core] not in HOSTS:
            continue  # only epilogues the rules fold into a matrix node
        node = engine_map.node(name)
        if node is not None and node.kernels:
            disagreements.append(f"the rules fold {ops[name]} {name} into {core}; QNN runs it: {node.describe()}")
    assert not disagreements, "\n".join(disagreements)
    for stem_name in NOT_FOLDED_BY_RULES:  # the exceptions are still needed (the map still says so)
        if stem_name[0] == stem:
            assert engine_map.nodes[stem_name[1]].folded_into, stem_name


def test_googlenet_relus_join_their_conv_without_a_map(tmp_path):
    """The issue's case: the same file with no map beside it (op-type rules) fuses no Conv || Relu."""
    copy = tmp_path / "googlenet.onnx"
    copy.write_bytes((ROOT / "models" / "googlenet.onnx").read_bytes())
    core_of, ops, _ = _units(copy, "sm8650")
    relus = [name for name, op in ops.items() if op == "Relu"]
    assert len(relus) == 13 and all(ops[core_of[name]] == "Conv" for name in relus)


LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(LIGHT.glob("light_*.onnx"))


def _lone_folded_activations(result) -> list[str]:
    """Fused groups that pair a matrix op with a task that is only the activation QNN folds into it."""
    found = []
    for op in result.fused_ops:
        produced_by_matrix = {out for task in op.tasks if task.engine == "matrix" for n in task.nodes
                              if n.op_type in HOSTS for out in n.outputs}
        for task in op.tasks:
            computes = [n for n in task.nodes if n.op_type not in _QDQ]
            if computes and all(n.op_type in ACTIVATIONS for n in computes):
                found.append(f"{op.name}: {[n.op_type for n in computes]} "
                             f"(reads a matrix output of the group: {any(i in produced_by_matrix for n in computes for i in n.inputs)})")
    return found


@pytest.mark.skipif(not LIGHT_MODELS, reason="the onnx wheel ships no light models")
@pytest.mark.parametrize("target", ["sm8550", "sm8650", "sm8750", "x-elite"])
@pytest.mark.parametrize("allow_scalar", [False, True])
def test_light_models_pair_no_matrix_op_with_its_own_folded_activation(target, allow_scalar):
    lone = []
    for model in LIGHT_MODELS:
        result = hexfuse.analyze_model(model, scorer_for(target, 0.1, as_designed=True), allow_scalar=allow_scalar)
        analysis = result.analysis
        flat = analysis.flat
        for index in range(flat.node_count):  # every activation right after a weighted Conv joined its unit
            if flat.op_types[index] == "Relu":
                source = flat.producer[flat.inputs[index][0]]
                if source >= 0 and flat.op_types[source] == "Conv" and flat.consumers[flat.inputs[index][0]] == [index]:
                    assert analysis.units.unit_of[index] == analysis.units.unit_of[source], (model.name, index)
        lone += [f"{model.name}: {entry}" for entry in _lone_folded_activations(result)]
    assert not lone, "\n".join(lone)


# --- QNN itself: which activations its HTP matrix kernels absorb (simulator) ----------------------

def _probe_model() -> onnx.ModelProto:
    """x -> Conv -> A_i and x2 -> MatMul -> Add(bias) -> A_i for each activation A_i, and Elu."""
    rng = np.random.default_rng(0)

    def weight(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    nodes, outputs = [], []
    for i, act in enumerate((*ACTIVATIONS, "Elu")):
        for kind in ("conv", "mm"):
            tag = f"{kind}{i}"
            if kind == "conv":
                nodes.append(helper.make_node("Conv", ["x", f"w_{tag}", f"b_{tag}"], [f"h_{tag}"], name=f"{kind}_{act}",
                                              pads=[1, 1, 1, 1]))
                inits += [weight(f"w_{tag}", (16, 8, 3, 3)), weight(f"b_{tag}", (16,))]
                slope, shape = (16, 1, 1), [1, 16, 8, 8]
            else:
                nodes.append(helper.make_node("MatMul", ["x2", f"w_{tag}"], [f"m_{tag}"], name=f"{kind}_{act}"))
                nodes.append(helper.make_node("Add", [f"m_{tag}", f"b_{tag}"], [f"h_{tag}"], name=f"bias_{act}"))
                inits += [weight(f"w_{tag}", (64, 64)), weight(f"b_{tag}", (64,))]
                slope, shape = (64,), [1, 32, 64]
            extra = []
            if act == "PRelu":
                inits.append(weight(f"s_{tag}", slope))
                extra = [f"s_{tag}"]
            elif act == "Clip":
                extra = ["lo", "hi"]
            nodes.append(helper.make_node(act, [f"h_{tag}", *extra], [f"y_{tag}"], name=f"act_{kind}_{act}"))
            outputs.append(helper.make_tensor_value_info(f"y_{tag}", TensorProto.FLOAT, shape))
    graph = helper.make_graph(nodes, "activation_probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8]),
                               helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1, 32, 64])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.skipif(find_spec("onnxruntime_qnn") is None, reason="onnxruntime-qnn not installed")
def test_qnn_folds_every_listed_activation_into_its_matrix_op(tmp_path):
    """Prepares the probe on the HTP simulator with optrace (~5 s): the evidence behind folds.activation."""
    from hexfuse.tools.qnn_engines import build_engine_map

    path = tmp_path / "probe.onnx"
    onnx.save(_probe_model(), path)
    engine_map = build_engine_map(path, "sm8650")
    for act in ACTIVATIONS:
        for kind in ("conv", "mm"):
            node = engine_map.node(f"act_{kind}_{act}")
            assert node is not None and not node.kernels and node.folded_into == f"{kind}_{act}", (act, kind, node)
    for kind in ("conv", "mm"):  # the control: Elu runs its own HVX kernel, so it is not in the list
        assert engine_map.node(f"act_{kind}_Elu").kernels
