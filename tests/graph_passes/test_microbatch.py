"""Micro-batches: exact splits compute what the original computes, coupled ops are refused with the op
and the reason named, and ``--micro-batches`` keeps the unsplit model unless the cost model prefers the split."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import onnx
import pytest

from hexfuse import backend
from tests.passes import fuse_model
from hexfuse.cli import main
from hexfuse.graph_passes.analysis.sources import MICRO_BATCH
from hexfuse.graph_passes.cost.cli import scorer_for
from hexfuse.graph_passes.cost.target import target_to_dict
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.model import load_model
from hexfuse.graph_passes.microbatch.decide import SPLIT_MARGIN, fuse_micro_batched
from hexfuse.graph_passes.microbatch.split import SplitPlan, plan_split, split_model
from hexfuse.graph_passes.report.outputs import verify_result
from hexfuse.graph_passes.rewrite.ort_check import compare_on_cpu
from tests import builders
from tests.cost.specs import estimated
from tests.graph_passes import microbatch_models as mm

ROOT = Path(__file__).resolve().parents[2]
MLP_CHAIN = ROOT / "models" / "mlp_chain.onnx"


def _plan(model: onnx.ModelProto, tmp_path, count: int = 2, axis: int | None = None):
    loaded = load_model(builders.save(model, tmp_path / "m.onnx"))
    return loaded, plan_split(loaded.inferred, count, axis)


def _exact(loaded, plan: SplitPlan) -> onnx.ModelProto:
    split = split_model(loaded.model, plan)
    onnx.checker.check_model(split, full_check=True)
    diffs = compare_on_cpu(loaded.raw, split.SerializeToString(), seed=3)
    assert diffs and all(d.max_rel <= 1e-6 for d in diffs), [(d.name, d.max_rel) for d in diffs]
    return split


EXACT = {
    "token_mlp_tokens": (mm.token_mlp, 2, None, 1),
    "token_mlp_uneven": (mm.token_mlp, 3, None, 1),  # 16 rows into 6/5/5
    "conv_batch": (mm.conv_batch, 2, None, 0),
    "conv_batch_4": (mm.conv_batch, 4, None, 0),
    "views_and_tables": (mm.views_and_tables, 2, None, 1),
    "two_inputs": (mm.two_inputs_split_together, 4, None, 1),
    "qdq_chain": (mm.qdq_token_mlp, 2, None, 1),
    "input_also_output": (mm.input_also_output, 2, None, 1),
    "one_constant_two_axes": (mm.one_constant_two_axes, 2, None, 0),
}


@pytest.mark.parametrize("case", sorted(EXACT))
def test_exact_split_equals_the_original_on_cpu(tmp_path, case):
    make, count, axis, expected_axis = EXACT[case]
    loaded, plan = _plan(make(), tmp_path, count, axis)
    assert isinstance(plan, SplitPlan), plan
    assert {a for _, a in plan.inputs} == {expected_axis}
    split = _exact(loaded, plan)
    # each op on the path is copied once per slice; nothing the split does not reach is copied; a
    # quantized Split or Concat is a QDQ unit (one DQ or Q on the whole side, one per slice on the other)
    edges = len(plan.inputs) + len(plan.concats) + sum(count + 1 for _ in plan.quantized)
    assert len(split.graph.node) == count * len(plan.steps) + edges + len(loaded.model.graph.node) - len(plan.steps)
    assert {n.name.split("/")[0] for n in split.graph.node if n.name.startswith("mb")} == {f"mb{k}" for k in range(count)}


def test_quantized_boundaries_split_and_join_uint8_rows_as_qdq_units(tmp_path):
    """The boundary Q and DQ stay whole (the QNN EP runs them on the CPU); the Split and the Concat sit
    between a DQ and Qs of the same scale and zero point, so Q(DQ(q)) gives q back exactly."""
    loaded, plan = _plan(mm.qdq_token_mlp(), tmp_path)
    assert dict(plan.inputs) == {"in_q8": 1} and dict(plan.concats) == {"d_q8": 1}
    assert plan.quantized == {"in_q8": ("in_s", "in_z"), "d_q8": ("d_s", "d_z")}
    split = _exact(loaded, plan)
    producer = {out: node for node in split.graph.node for out in node.output}
    split_node = next(n for n in split.graph.node if n.op_type == "Split")
    assert producer[split_node.input[0]].op_type == "DequantizeLinear"
    assert {n.op_type for n in split.graph.node if set(n.input) & set(split_node.output)} == {"QuantizeLinear"}
    assert [n.name for n in split.graph.node if n.input and n.input[0] in ("x", "d_q8")] == ["q_in", "dq_d"]


@pytest.mark.parametrize("shape, result", [
    ([0, 0, 4, 16], "split"),  # 0 copies the (sliced) token length
    ([1, -1, 64], "split"),  # -1 infers it
    ([16, 64], "split"),  # the literal 16 becomes each slice's length
    ([1, 16, 8, 8], "split"),
    ([-1, 8, 8], "split"),
    ([4, 4, 64], "Reshape 'reshape' folds the split axis away ([1, 16, 64] -> [4, 4, 64])"),
    ([1, 1024], "Reshape 'reshape' folds the split axis away"),
])
def test_reshape_keeps_or_folds_the_token_axis(tmp_path, shape, result):
    loaded, plan = _plan(mm.reshaped(shape), tmp_path, 2, axis=1)
    if result == "split":
        assert isinstance(plan, SplitPlan), plan
        _exact(loaded, plan)
    else:
        assert isinstance(plan, str) and result in plan, plan


COUPLED = {  # (model, axis asked for, reason)
    "reduce over tokens": (mm.reduce_over_tokens, 1, "ReduceSum 'sum_tokens' computes over the split axis"),
    "softmax over tokens": (mm.softmax_over_tokens, 1, "Softmax 'softmax_tokens' computes over the split axis"),
    "attention": (mm.attention, None, "MatMul 'scores' multiplies two split operands along different axes (attention"),
    "batchnorm training": (mm.batchnorm_training, None, "BatchNormalization 'bn_train' is in training form"),
    "reshape folds batch": (mm.reshape_folding_batch, None, "Reshape 'fold' folds the split axis away"),
    "contracted features": (mm.token_mlp, 2, "LayerNormalization 'norm' computes over the split axis"),
}


@pytest.mark.parametrize("case", sorted(COUPLED))
def test_coupled_model_is_refused_naming_the_op(tmp_path, case):
    make, axis, reason = COUPLED[case]
    _, plan = _plan(make(), tmp_path, 2, axis)
    assert isinstance(plan, str) and reason in plan, plan


def test_auto_axis_falls_back_to_an_axis_that_splits(tmp_path):
    """Softmax over tokens couples the token axis, not the feature axis: auto picks the features."""
    loaded, plan = _plan(mm.softmax_over_tokens(), tmp_path)
    assert isinstance(plan, SplitPlan) and plan.inputs == (("x", 2),)
    _exact(loaded, plan)


def test_conv_refuses_spatial_axes_but_splits_batch(tmp_path):
    _, spatial = _plan(mm.conv_batch(), tmp_path, 2, axis=2)
    assert isinstance(spatial, str) and "Conv 'conv' slides or normalizes over axis 2" in spatial
    _, batch = _plan(mm.conv_batch(), tmp_path, 2, axis=0)
    assert isinstance(batch, SplitPlan)


def test_bad_counts_and_axes_are_errors(tmp_path):
    loaded, _ = _plan(mm.token_mlp(), tmp_path)
    for count in (1, 0, 65):
        with pytest.raises(HexfuseError, match="--micro-batches must be between 2 and 64"):
            plan_split(loaded.inferred, count)
    with pytest.raises(HexfuseError, match="--split-axis must be a non-negative"):
        plan_split(loaded.inferred, 2, -1)
    too_many = plan_split(loaded.inferred, 17, 1)
    assert isinstance(too_many, str) and "length 16 < 17 micro-batches" in too_many


@pytest.mark.parametrize("name, op", [("neox_block.onnx", "MatMul 'node_matmul'"), ("llama_prefill.onnx", "MatMul 'node_matmul'")])
def test_bundled_language_models_are_refused_at_attention(name, op):
    loaded = load_model(ROOT / "models" / name)
    plan = plan_split(loaded.inferred, 2)
    assert isinstance(plan, str) and f"{op} multiplies two split operands" in plan and "attention" in plan


def test_splitting_a_split_model_is_refused(tmp_path):
    loaded, plan = _plan(mm.token_mlp(), tmp_path)
    split = split_model(loaded.model, plan)
    again = load_model(builders.save(split, tmp_path / "split.onnx"))
    assert plan_split(again.inferred, 2) == "the model is already split into micro-batches"


# ------------------------------------------------------------------ the bundled single chain


def _scorer():
    return scorer_for(estimated("sm8550"), 0.1, as_designed=True)  # the chains below are sized for its resident_mb and overheads


def test_mlp_chain_has_no_vector_work_left_to_overlap_once_activations_fold():
    """QNN runs mlp_chain's Relu and Tanh inside the MatMuls' HMX kernels: the slices have nothing to pair."""
    result, decision = fuse_micro_batched(MLP_CHAIN, 2, scorer_for("sm8550", 0.0, as_designed=True), backend(allow_scalar=True),
                                          always=True, force=True)
    assert decision.split and not result.spec.fused_ops
    analysis = result.analyzed.analysis
    units = [[analysis.flat.op_types[i] for i in nodes] for nodes in analysis.units.nodes]
    matrix_units = [ops for ops, engine in zip(units, analysis.units.engine) if engine.value == "matrix"]
    # per slice: MatMul+Add+Relu, MatMul+Add+Tanh, MatMul+Add; no Relu or Tanh is a unit of its own
    assert sorted(matrix_units) == sorted([["MatMul", "Add", "Relu"], ["MatMul", "Add", "Tanh"], ["MatMul", "Add"]] * 2)


def test_chain_fuses_only_after_micro_batching_and_stays_exact(tmp_path):
    chain = Path(mm.elu_chain(tmp_path / "elu_chain.onnx"))
    assert not fuse_model(chain, _scorer()).spec.fused_ops  # a strict chain: nothing independent
    # margin 0: on HTP the 8-row slices' groups save only their overlap (the matrix task keeps its QNN
    # ops and their dispatches), below the default 10% margin; the whole split is predicted slower
    # than unsplit (the copies' dispatches), so only --force writes it; the split is under test here
    result, decision = fuse_micro_batched(chain, 2, scorer_for("sm8550", 0.0, as_designed=True), backend(allow_scalar=True),
                                          always=True, force=True)
    assert decision.split and "split into 2 (--split always --force: predicted slower)" in decision.reason
    ops = result.spec.fused_ops
    assert len(ops) >= 2 and {op.source for op in ops} == {MICRO_BATCH}
    # on HTP only groups whose tasks overlap fuse (entry merging alone is not enough: scorer.py)
    assert all(node.group.verdict.details["overlap_gain"] > 0 for node in result.analyzed.fused_nodes)
    for op in ops:  # slice k's matrix work beside the other slice's vector work
        engines = {t.engine: t.nodes[0].name.split("/")[0] for t in op.tasks}
        assert set(engines) == {"matrix", "vector"} and engines["matrix"] != engines["vector"], engines
    assert result.analyzed.loaded.path == chain  # report and spec name the original
    assert result.spec.source_sha256 == hashlib.sha256(chain.read_bytes()).hexdigest()
    diffs = compare_on_cpu(chain.read_bytes(), result.model_bytes, seed=11)
    assert diffs and all(d.equal for d in diffs), [(d.name, d.max_rel) for d in diffs]


def test_split_predicted_slower_is_refused_without_force(tmp_path):
    chain = mm.elu_chain(tmp_path / "elu_chain.onnx")
    with pytest.raises(HexfuseError, match=r"--split always: the split model is predicted \d+\.\d\dx slower .*--force"):
        fuse_micro_batched(chain, 2, scorer_for("sm8550", 0.0, as_designed=True), backend(allow_scalar=True), always=True)
    _, decision = fuse_micro_batched(chain, 2, scorer_for("sm8550", 0.0, as_designed=True), backend(allow_scalar=True), always=True,
                                     force=True)
    assert decision.split_time.total_ns > decision.unsplit_time.total_ns  # what the refusal was about


def test_a_split_that_fuses_nothing_verifies_against_the_file(tmp_path):
    """--split always --force with no group worth fusing writes the split model alone: the structure
    check compares it with the split model as loaded (it has no DQ copies: those are made for groups),
    and the original file runs too. Before, the copies made it fail as "nodes left unfused differ"."""
    source = builders.save(mm.qdq_token_mlp(), tmp_path / "chain.onnx")
    result, decision = fuse_micro_batched(source, 2, _scorer(), backend(), always=True, force=True)
    assert decision.split and not result.analyzed.fused_nodes and result.split == 2
    verification = verify_result(result)
    assert verification.against_file and verification.equal and verification.diffs
    assert {d.name for d in verification.diffs} == {o.name for o in onnx.load(source).graph.output}


def test_a_split_is_checked_against_the_file_not_trusted(tmp_path):
    source = builders.save(mm.qdq_token_mlp(), tmp_path / "chain.onnx")
    result, _ = fuse_micro_batched(source, 2, _scorer(), backend(), always=True, force=True)
    wrong = onnx.load_model_from_string(result.model_bytes)  # a split that joins its halves the wrong way round
    (join,) = [n for n in wrong.graph.node if n.op_type == "Concat"]
    join.input[0], join.input[1] = join.input[1], join.input[0]
    result.analyzed.loaded.model.CopyFrom(wrong)  # as if split_model had made it: the structure check passes
    result.model_bytes = wrong.SerializeToString()
    with pytest.raises(HexfuseError, match="differs from the original"):
        verify_result(result)


@pytest.mark.parametrize("split", ["a split", "no split"])
def test_cli_writes_a_split_without_fused_nodes(tmp_path, capsys, split):
    source = builders.save(mm.qdq_token_mlp(), tmp_path / "chain.onnx")
    flags = ["--micro-batches", "2", "--split", "always", "--force"] if split == "a split" else []
    code, err = _cli(capsys, "fuse", str(source), "-o", str(tmp_path / "out.onnx"), *flags)
    assert code == 0, err
    if split == "a split":
        assert "split into 2 micro-batches, with no fused node" in err
        assert "micro-batch split edited the model" in (tmp_path / "out.hexfuse.md").read_text()
        diffs = compare_on_cpu(Path(source).read_bytes(), (tmp_path / "out.onnx").read_bytes(), seed=3)
        assert diffs and all(d.equal for d in diffs)
    else:
        assert "nothing to fuse" in err and (tmp_path / "out.onnx").read_bytes() == Path(source).read_bytes()


def test_cost_model_keeps_the_unsplit_chain_where_the_split_does_not_pay(tmp_path):
    """16 tokens: dispatch-bound, the copies cost more than fusing them saves. 4096 tokens: the split
    keeps each slice's activations resident in VTCM and the fused slices overlap."""
    chain = mm.elu_chain(tmp_path / "elu_chain.onnx")
    short, decision = fuse_micro_batched(chain, 2, _scorer(), backend(allow_scalar=True))
    assert not decision.split and not short.changed
    assert decision.split_time.total_ns > decision.unsplit_time.total_ns * (1 - SPLIT_MARGIN)
    assert decision.split_time.dispatches > decision.unsplit_time.dispatches
    assert "not split: split and fused predicts" in decision.reason and "--split always" in decision.reason
    long = onnx.load(chain)
    for info in (long.graph.input[0], long.graph.output[0]):
        info.type.tensor_type.shape.dim[1].dim_value = 4096
    del long.graph.value_info[:]
    result, decision = fuse_micro_batched(builders.save(long, tmp_path / "long.onnx"), 2, _scorer(), backend(allow_scalar=True))
    assert decision.split and decision.split_time.total_ns < decision.unsplit_time.total_ns * (1 - SPLIT_MARGIN)
    assert result.spec.fused_ops and all(op.source == MICRO_BATCH for op in result.spec.fused_ops)


def test_row_padding_is_priced_on_both_sides():
    _, decision = fuse_micro_batched(MLP_CHAIN, 2, _scorer(), backend(allow_scalar=True))
    # 16 rows fill half of a 32-row HMX tile (padding = matrix time), 8 rows a quarter (3x matrix time)
    assert 0 < decision.unsplit_time.padding_ns < decision.split_time.padding_ns


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_cli_micro_batches_writes_byte_identical_outputs_and_leaves_input_alone(tmp_path, capsys):
    source = Path(mm.elu_chain(tmp_path / "elu_chain.onnx"))
    original = source.read_bytes()
    outputs = []
    for name in ("a", "b"):
        code, err = _cli(capsys, "fuse", str(source), "-o", str(tmp_path / f"{name}.onnx"), "--micro-batches", "2",
                         "--split", "always", "--force", "--min-gain", "0", "--as-designed", "--allow-scalar")  # see the tests above
        assert code == 0, err
        # bias Adds fold into the MatMul tasks; of the slice pairs, two overlap on their engines and fuse
        assert "micro-batches: split into 2" in err and "2 fused nodes" in err
        outputs.append([(tmp_path / f"{name}{ext}").read_bytes() for ext in (".onnx", ".hexfuse.md")])
    assert outputs[0] == outputs[1]
    assert source.read_bytes() == original
    report = (tmp_path / "a.hexfuse.md").read_text()
    assert "| micro-batch: mb" in report and "## Micro-batches" in report and "exact split: 2 micro-batches of 8/8 rows" in report
    spec = json.loads((tmp_path / "a.hexfuse.json").read_text())
    assert {op["source"] for op in spec["fused_ops"]} == {"micro-batch"}
    # fusing the fused split model again changes nothing, with or without the flag
    code, err = _cli(capsys, "fuse", str(tmp_path / "a.onnx"), "-o", str(tmp_path / "again.onnx"), "--micro-batches", "2")
    assert code == 0 and "not split: the model is already fused" in err
    assert (tmp_path / "again.onnx").read_bytes() == outputs[0][0]


def test_cli_split_always_predicted_slower_is_one_line_refusal_and_writes_nothing(tmp_path, capsys):
    code, err = _cli(capsys, "fuse", str(MLP_CHAIN), "-o", str(tmp_path / "x.onnx"), "--micro-batches", "2",
                     "--split", "always")
    assert code == 1 and err.count("hexfuse: error:") == 1 and "x slower than unsplit" in err and "--force" in err
    assert not list(tmp_path.iterdir())
    code, err = _cli(capsys, "fuse", str(MLP_CHAIN), "-o", str(tmp_path / "x.onnx"), "--micro-batches", "2",
                     "--split", "always", "--force")
    assert code == 0 and "--force: predicted slower" in err and (tmp_path / "x.onnx").is_file()


def test_cli_refusal_is_a_reason_not_an_error(tmp_path, capsys):
    out = tmp_path / "neox.onnx"
    code, err = _cli(capsys, "analyze", str(ROOT / "models" / "neox_block.onnx"), "--micro-batches", "2", "--json")
    assert code == 0 and "not split: no axis splits exactly" in err and "attention across the split axis" in err
    code, err = _cli(capsys, "fuse", str(ROOT / "models" / "neox_block.onnx"), "-o", str(out), "--micro-batches", "2")
    assert code == 0 and "attention across the split axis" in err
    assert "attention across the split axis" in out.with_suffix(".hexfuse.md").read_text()


def test_cli_bad_count_is_one_line_error(tmp_path, capsys):
    code, err = _cli(capsys, "fuse", str(MLP_CHAIN), "-o", str(tmp_path / "x.onnx"), "--micro-batches", "1")
    assert code == 1 and err.count("hexfuse: error:") == 1 and "--micro-batches must be between 2 and 64" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(find_spec("onnxruntime_qnn") is None, reason="onnxruntime-qnn is not installed")
def test_split_and_fused_qdq_chain_matches_the_original_on_qnn_htp(tmp_path, capsys):
    source = builders.save(mm.qdq_token_mlp(), tmp_path / "chain.onnx")
    target = tmp_path / "v73_estimates.json"  # the chain is sized for the pre-fit sm8550 figures
    target.write_text(json.dumps(target_to_dict(estimated("sm8550"))))
    code, err = _cli(capsys, "fuse", source, "-o", str(tmp_path / "fused.onnx"), "--micro-batches", "2", "--split", "always",
                     "--target", str(target), "--force", "--min-gain", "0", "--as-designed")  # predicted slower: the numerics are under test
    assert code == 0 and "split into 2" in err and " fused nodes" in err and " 0 fused nodes" not in err, err
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("qnn_compare.py")), source, str(tmp_path / "fused.onnx")],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])[0]
    assert row["max_abs"] == [0.0] and row["max_ref"][0] > 0, row
    assert row["cpu_nodes"][0] == row["cpu_nodes"][1] == 2, row  # only the boundary Q and DQ leave HTP
    assert row["qnn_nodes"][1] > row["qnn_nodes"][0] > 0, row
