"""Kernels added for ops the pass classifies: every case is a small ONNX graph run once by ONNX Runtime
(CPU EP) and once as a fused op of one host-built package (all cases share one spec, so one compile per
session), in concurrent and internal-serial mode. Float outputs follow the harness contract (1e-5
relative), integers and bools are exact. Bool tensors stay inside the fused op: the package boundary
carries numeric dtypes only. Also: unsupported attribute combinations are refused at generation time."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import FusedOp, FusionSpec, NodeSpec, TaskSpec, TensorSpec
from hexfuse.op_package.build import build_host
from hexfuse.op_package.host import HostPackage
from hexfuse.op_package.plan import plan_fused_op
from hexfuse.op_package.render import render_package
from hexfuse.op_package.writer import write_tree
from tests.op_package._harness import compare

OPSET = 21
RNG = np.random.default_rng(1234)


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def uniform(lo: float, hi: float, *shape: int) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def ints(lo: int, hi: int, *shape: int, dtype=np.int64) -> np.ndarray:
    return RNG.integers(lo, hi, size=shape).astype(dtype)


@dataclass
class Case:
    name: str
    nodes: list[onnx.NodeProto]
    inputs: dict[str, np.ndarray]
    outputs: list[str]
    static: tuple[str, ...] = ()  # inputs that are initializers in a real model (pads, axes, k...)
    engine: str = "vector"
    opset: int = OPSET
    values: dict[str, np.ndarray] = field(default_factory=dict)  # every tensor as ORT computed it
    expected: dict[str, np.ndarray] = field(default_factory=dict)  # outputs where ONNX and ORT disagree

    @property
    def op_type(self) -> str:
        return "HexFuse_x_" + "".join(c if c.isalnum() else "_" for c in self.name)


def node(op_type: str, inputs: list[str], outputs: list[str], **attrs) -> onnx.NodeProto:
    return helper.make_node(op_type, inputs, outputs, name=f"{op_type}_{outputs[0]}", **attrs)


def unary(op_type: str, x: np.ndarray, **attrs) -> Case:
    return Case(op_type + "".join(f"_{k}" for k in attrs), [node(op_type, ["x"], ["y"], **attrs)], {"x": x}, ["y"])


def run_ort(case: Case) -> dict[str, np.ndarray]:
    names = [o for n in case.nodes for o in n.output if o]
    graph = helper.make_graph(
        case.nodes, case.name,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in case.inputs.items()],
        [onnx.ValueInfoProto(name=n) for n in names])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 10
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    values = dict(zip(names, session.run(names, case.inputs)))
    values.update(case.inputs)
    return values


def tensor_spec(name: str, value: np.ndarray, static: bool = False) -> TensorSpec:
    return TensorSpec(name, str(value.dtype), tuple(int(d) for d in value.shape), static)


def node_spec(n: onnx.NodeProto) -> NodeSpec:
    attrs = {}
    for a in n.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list):
            v = tuple(x.decode() if isinstance(x, bytes) else x for x in v)
        elif isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v).item()
        attrs[a.name] = v
    return NodeSpec(n.name, n.op_type, "", tuple(n.input), tuple(n.output), attrs)


def fused_op(case: Case) -> FusedOp:
    values = case.values
    names = list(dict.fromkeys([*case.inputs, *(o for n in case.nodes for o in n.output if o)]))
    tensors = tuple(tensor_spec(n, values[n], n in case.static) for n in names)
    inputs = tuple(t for t in tensors if t.name in case.inputs)
    outputs = tuple(t for t in tensors if t.name in case.outputs)
    task = TaskSpec("t0", case.engine, tuple(node_spec(n) for n in case.nodes), tuple(case.inputs),
                    tuple(case.outputs))
    return FusedOp(case.op_type, case.op_type, inputs, outputs, (task,), tensors)


# ---------------------------------------------------------------------------------------------------------
# Cases

def _priority1() -> list[Case]:
    cases = []
    x = randn(4, 257)
    for op in ("Sign", "Tan", "Sinh", "Cosh", "Atan", "Asinh", "Softsign", "Mish"):
        cases.append(unary(op, x if op != "Tan" else uniform(-1.4, 1.4, 4, 257)))
    x0 = x.copy()
    x0[0, :4] = 0.0
    cases.append(unary("Sign", x0))
    cases[-1].name = "Sign_zeros"
    cases.append(unary("Round", np.array([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.49, -3.51, 0.0, 7.5]], np.float32)))
    for op in ("Asin", "Acos", "Atanh"):
        cases.append(unary(op, uniform(-0.99, 0.99, 3, 100)))
    cases.append(unary("Acosh", uniform(1.0, 6.0, 3, 100)))
    cases += [unary("Selu", x), unary("Selu", x, alpha=1.5, gamma=2.0), unary("Celu", x), unary("Celu", x, alpha=0.5),
              unary("ThresholdedRelu", x), unary("ThresholdedRelu", x, alpha=0.25),
              unary("Shrink", x), unary("Shrink", x, lambd=0.7, bias=0.3),
              unary("Mish", randn(64, 1024, scale=8.0))]  # several tiles; softplus overflow region
    cases[-1].name = "Mish_big"
    cases.append(Case("PRelu_channel", [node("PRelu", ["x", "s"], ["y"])],
                      {"x": randn(2, 3, 4, 5), "s": randn(3, 1, 1)}, ["y"]))
    cases.append(Case("PRelu_scalar", [node("PRelu", ["x", "s"], ["y"])], {"x": randn(2, 7), "s": randn(1)}, ["y"]))
    cases.append(Case("Sum3", [node("Sum", ["a", "b", "c"], ["y"])],
                      {"a": randn(2, 3, 4), "b": randn(3, 1), "c": randn(4)}, ["y"]))
    cases.append(Case("Sum1", [node("Sum", ["a"], ["y"])], {"a": randn(5, 6)}, ["y"]))
    cases.append(Case("Mean4", [node("Mean", ["a", "b", "c", "d"], ["y"])],
                      {"a": randn(2, 3, 4), "b": randn(1, 3, 1), "c": randn(4), "d": randn(2, 1, 4)}, ["y"]))
    cases.append(Case("Max3", [node("Max", ["a", "b", "c"], ["y"])],
                      {"a": randn(3, 4), "b": randn(4), "c": randn(3, 1)}, ["y"]))
    cases.append(Case("Mod_fmod_float", [node("Mod", ["a", "b"], ["y"], fmod=1)],
                      {"a": randn(4, 5, scale=10), "b": uniform(0.5, 3.0, 5) * np.array([1, -1, 1, -1, 1], np.float32)},
                      ["y"]))
    for dtype in (np.int64, np.int32, np.int8):
        a, b = ints(-50, 50, 4, 6, dtype=dtype), ints(1, 9, 6, dtype=dtype) * np.array([1, -1, 1, -1, 1, -1], dtype)
        for fmod in (0, 1):
            cases.append(Case(f"Mod_{np.dtype(dtype).name}_fmod{fmod}", [node("Mod", ["a", "b"], ["y"], fmod=fmod)],
                              {"a": a, "b": b}, ["y"]))
    # comparisons: bool stays inside, Where picks floats (or ints) back out
    a, b = randn(3, 4, 5), randn(4, 1)
    b[0, 0] = a[0, 0, 0]
    for op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
        cases.append(Case(f"{op}_Where", [node(op, ["a", "b"], ["c"]), node("Where", ["c", "a", "z"], ["y"])],
                          {"a": a, "b": b, "z": randn(5)}, ["y"]))
        cases.append(Case(f"{op}_int_Cast", [node(op, ["i", "j"], ["c"]), node("Cast", ["c"], ["y"], to=7)],
                          {"i": ints(-3, 3, 6, 7), "j": ints(-3, 3, 7)}, ["y"]))
    cases.append(Case("Equal_int32_Cast", [node("Equal", ["i", "j"], ["c"]), node("Cast", ["c"], ["y"], to=1)],
                      {"i": ints(0, 3, 6, 7, dtype=np.int32), "j": ints(0, 3, 6, 1, dtype=np.int32)}, ["y"]))
    for op in ("And", "Or", "Xor"):
        cases.append(Case(f"{op}_Not", [node("Less", ["a", "z0"], ["p"]), node("Greater", ["b", "z1"], ["q"]),
                                         node(op, ["p", "q"], ["r"]), node("Not", ["r"], ["s"]),
                                         node("Equal", ["r", "p"], ["e"]),
                                         node("Cast", ["r"], ["y"], to=1), node("Cast", ["s"], ["w"], to=6),
                                         node("Cast", ["e"], ["v"], to=7)],
                          {"a": randn(4, 6), "b": randn(6), "z0": np.zeros(1, np.float32),
                           "z1": np.zeros((4, 1), np.float32)}, ["y", "w", "v"]))
    cases.append(Case("Where_int64_broadcast", [node("Less", ["a", "t"], ["c"]), node("Where", ["c", "i", "j"], ["y"])],
                      {"a": randn(3, 1, 5), "t": randn(1), "i": ints(-9, 9, 4, 5), "j": ints(-9, 9, 3, 4, 1)}, ["y"]))
    special = np.array([[np.nan, np.inf, -np.inf, 0.0, 1.0, -3.0]], np.float32)
    cases.append(Case("IsNaN_IsInf", [node("IsNaN", ["x"], ["n"]), node("IsInf", ["x"], ["i"]),
                                       node("IsInf", ["x"], ["p"], detect_negative=0),
                                       node("IsInf", ["x"], ["m"], detect_positive=0),
                                       node("Cast", ["n"], ["yn"], to=1), node("Cast", ["i"], ["yi"], to=6),
                                       node("Cast", ["p"], ["yp"], to=2), node("Cast", ["m"], ["ym"], to=7)],
                      {"x": special}, ["yn", "yi", "yp", "ym"]))
    cases.append(Case("CastLike_and_bool_cast",
                      [node("CastLike", ["x", "like"], ["y"]), node("Cast", ["x"], ["b"], to=9),
                       node("Cast", ["b"], ["w"], to=1)],
                      {"x": np.array([[0.0, 0.5, -2.0, 3.7, -0.2]], np.float32), "like": np.zeros(2, np.int32)},
                      ["y", "w"]))
    return cases


def _priority2() -> list[Case]:
    cases = []
    x = randn(2, 3, 4, 5)
    pads = np.array([0, 1, 2, 1, 0, 2, 1, 3], np.int64)
    for mode in ("constant", "reflect", "edge", "wrap"):
        cases.append(Case(f"Pad_{mode}", [node("Pad", ["x", "pads"], ["y"], mode=mode)], {"x": x, "pads": pads},
                          ["y"], static=("pads",), engine="dma"))
    cases.append(Case("Pad_value_axes_negative", [node("Pad", ["x", "pads", "v", "axes"], ["y"])],
                      {"x": x, "pads": np.array([2, -1, 1, 2], np.int64), "v": np.array(1.5, np.float32),
                       "axes": np.array([-1, 1], np.int64)}, ["y"], static=("pads", "v", "axes"), engine="dma"))
    cases.append(Case("Pad_int64_edge", [node("Pad", ["i", "pads"], ["y"], mode="edge")],
                      {"i": ints(-9, 9, 3, 4), "pads": np.array([1, 0, 2, 3], np.int64)}, ["y"], static=("pads",)))
    cases.append(Case("Pad_opset2_attr", [node("Pad", ["x"], ["y"], pads=[0, 0, 1, 1, 0, 0, 2, 0], value=-3.0)],
                      {"x": x}, ["y"], opset=10))
    cases.append(Case("Tile", [node("Tile", ["x", "r"], ["y"])], {"x": randn(2, 3, 4), "r": np.array([2, 1, 3], np.int64)},
                      ["y"], static=("r",), engine="dma"))
    cases.append(Case("Tile_big", [node("Tile", ["x", "r"], ["y"])], {"x": randn(64, 1, 512), "r": np.array([1, 8, 2], np.int64)},
                      ["y"], static=("r",), engine="dma"))
    # Slice moves contiguous runs when the innermost step is 1 (runs cross tile boundaries: 3-D, odd sizes)
    sl = randn(3, 9, 37)
    for name, starts, ends, axes, steps in (
            ("inner", [2], [33], [2], [1]), ("rows_and_inner", [1, 4], [8, 30], [1, 2], [1, 1]),
            ("inner_step2", [0], [37], [2], [2]), ("inner_reverse", [-1], [-38], [2], [-1]),
            ("outer_step3", [0, 5], [9, 9], [1, 2], [3, 1]), ("all_axes_negative", [-2, 1, -30], [3, 8, -1], [0, -2, -1],
                                                              [1, 2, 1])):
        consts = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64),
                  "axes": np.array(axes, np.int64), "steps": np.array(steps, np.int64)}
        cases.append(Case(f"Slice_{name}", [node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])],
                          {"x": sl, **consts}, ["y"], static=tuple(consts), engine="dma"))
    big = {"starts": np.array([1], np.int64), "ends": np.array([128], np.int64), "axes": np.array([2], np.int64)}
    cases.append(Case("Slice_big_inner_tiles_split_rows", [node("Slice", ["x", "starts", "ends", "axes"], ["y"])],
                      {"x": randn(37, 61, 129), **big}, ["y"], static=tuple(big), engine="dma"))
    cases.append(Case("Slice_opset1_attrs", [node("Slice", ["x"], ["y"], starts=[1, 3], ends=[3, 36], axes=[0, 2])],
                      {"x": sl}, ["y"], opset=9, engine="dma"))
    m = randn(2, 5, 7)
    for upper in (0, 1):
        for k in (-2, 0, 3):
            cases.append(Case(f"Trilu_upper{upper}_k{k}", [node("Trilu", ["x", "k"], ["y"], upper=upper)],
                              {"x": m, "k": np.array(k, np.int64)}, ["y"], static=("k",), engine="dma"))
    cases.append(Case("Trilu_no_k_int32", [node("Trilu", ["i"], ["y"])], {"i": ints(-9, 9, 4, 4, dtype=np.int32)}, ["y"]))
    cases.append(Case("ReverseSequence_time0", [node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=1, time_axis=0)],
                      {"x": randn(5, 4, 3), "lens": np.array([5, 1, 3, 0], np.int64)}, ["y"], engine="dma"))
    cases.append(Case("ReverseSequence_batch0", [node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=0, time_axis=1)],
                      {"x": randn(3, 6, 2), "lens": np.array([6, 2, 4], np.int64)}, ["y"], engine="dma"))
    data = randn(4, 5, 6)
    for axis in (0, 1, -1):
        shape = [3, 4, 2]
        n = data.shape[axis]
        cases.append(Case(f"GatherElements_axis{axis}", [node("GatherElements", ["d", "i"], ["y"], axis=axis)],
                          {"d": data, "i": ints(-n, n, *shape)}, ["y"], engine="dma"))
    cases.append(Case("GatherElements_int32_idx_int64_data", [node("GatherElements", ["d", "i"], ["y"], axis=1)],
                      {"d": ints(0, 100, 3, 4), "i": ints(0, 4, 3, 6, dtype=np.int32)}, ["y"], engine="dma"))
    cases.append(Case("GatherND_k2", [node("GatherND", ["d", "i"], ["y"])],
                      {"d": data, "i": np.stack([ints(-4, 4, 3, 2), ints(0, 5, 3, 2)], axis=-1)}, ["y"], engine="dma"))
    cases.append(Case("GatherND_k3", [node("GatherND", ["d", "i"], ["y"])],
                      {"d": data, "i": np.stack([ints(0, 4, 7), ints(0, 5, 7), ints(-6, 6, 7)], axis=-1)}, ["y"]))
    cases.append(Case("GatherND_batch1", [node("GatherND", ["d", "i"], ["y"], batch_dims=1)],
                      {"d": data, "i": ints(0, 5, 4, 3, 1)}, ["y"], engine="dma"))
    idx = np.array([[0, 1], [3, 4], [2, 0]], np.int64)
    for reduction in ("none", "add", "mul", "max", "min"):
        cases.append(Case(f"ScatterND_{reduction}", [node("ScatterND", ["d", "i", "u"], ["y"], reduction=reduction)],
                          {"d": data, "i": idx if reduction == "none" else np.concatenate([idx, idx[:1]]),
                           "u": randn(3 if reduction == "none" else 4, 6)}, ["y"], engine="dma"))
    cases.append(Case("ScatterND_int64_k1", [node("ScatterND", ["d", "i", "u"], ["y"])],
                      {"d": ints(0, 9, 5, 3), "i": np.array([[4], [-5]], np.int64), "u": ints(10, 20, 2, 3)}, ["y"]))
    ties = np.round(randn(4, 6, 5), 0)
    for op in ("ArgMax", "ArgMin"):
        for axis, keepdims, last in ((0, 1, 0), (1, 0, 1), (-1, 1, 1), (2, 0, 0)):
            cases.append(Case(f"{op}_axis{axis}_keep{keepdims}_last{last}",
                              [node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)],
                              {"x": ties}, ["y"]))
    for exclusive in (0, 1):
        for reverse in (0, 1):
            cases.append(Case(f"CumSum_ex{exclusive}_rev{reverse}",
                              [node("CumSum", ["x", "a"], ["y"], exclusive=exclusive, reverse=reverse)],
                              {"x": randn(3, 7, 4), "a": np.array(1, np.int64)}, ["y"], static=("a",)))
    cases.append(Case("CumSum_int32_neg_axis", [node("CumSum", ["i", "a"], ["y"])],
                      {"i": ints(-9, 9, 3, 5, dtype=np.int32), "a": np.array(-1, np.int32)}, ["y"], static=("a",)))
    cases.append(Case("CumSum_int64_axis0", [node("CumSum", ["i", "a"], ["y"], reverse=1)],
                      {"i": ints(-9, 9, 6, 2), "a": np.array([0], np.int64)}, ["y"], static=("a",)))
    x4 = randn(2, 8, 3, 5)
    for mode in ("DCR", "CRD"):
        cases.append(Case(f"DepthToSpace_{mode}", [node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode)],
                          {"x": x4}, ["y"], engine="dma"))
    cases.append(Case("SpaceToDepth", [node("SpaceToDepth", ["x"], ["y"], blocksize=3)], {"x": randn(2, 3, 6, 9)},
                      ["y"], engine="dma"))
    return cases


def _priority3() -> list[Case]:
    cases = []
    x = randn(2, 6, 5, 4)
    for op in ("ReduceLogSumExp", "ReduceLogSum"):
        data = x * 30 if op == "ReduceLogSumExp" else np.abs(x) + 0.1
        cases.append(Case(f"{op}_axes", [node(op, ["x", "a"], ["y"], keepdims=0)],
                          {"x": data, "a": np.array([1, -1], np.int64)}, ["y"], static=("a",)))
        cases.append(Case(f"{op}_all", [node(op, ["x"], ["y"])], {"x": data}, ["y"]))
    cases.append(Case("InstanceNormalization", [node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)],
                      {"x": x * 3 + 1, "s": randn(6), "b": randn(6)}, ["y"]))
    cases.append(Case("GroupNormalization_21", [node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3)],
                      {"x": x * 2 - 1, "s": randn(6), "b": randn(6)}, ["y"]))
    cases.append(Case("GroupNormalization_18", [node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
                      {"x": x, "s": randn(2), "b": randn(2)}, ["y"], opset=18))
    cases.append(Case("MeanVarianceNormalization", [node("MeanVarianceNormalization", ["x"], ["y"])],
                      {"x": x * 2 + 3}, ["y"]))
    cases.append(Case("MeanVarianceNormalization_axes", [node("MeanVarianceNormalization", ["x"], ["y"], axes=[1, -1])],
                      {"x": x}, ["y"]))
    for p in (1, 2):
        for axis in (1, -1):
            cases.append(Case(f"LpNormalization_p{p}_axis{axis}", [node("LpNormalization", ["x"], ["y"], p=p, axis=axis)],
                              {"x": x}, ["y"]))
    for axis in (0, 1, -1):
        cases.append(Case(f"Hardmax_axis{axis}", [node("Hardmax", ["x"], ["y"], axis=axis)],
                          {"x": np.round(x, 0)}, ["y"]))
    cases.append(Case("LpPool_p2", [node("LpPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 1, 0])],
                      {"x": x}, ["y"]))
    cases.append(Case("LpPool_p3", [node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=3)], {"x": x}, ["y"]))
    cases.append(Case("GlobalLpPool", [node("GlobalLpPool", ["x"], ["y"])], {"x": x}, ["y"]))
    cases.append(Case("GlobalLpPool_p1", [node("GlobalLpPool", ["x"], ["y"], p=1)], {"x": x}, ["y"]))
    return cases


def _special_values() -> list[Case]:
    """NaN, infinities and out-of-range integers, where std::max / std::min, a NaN-blind comparison, the
    Clip defaults or a cast through double gave other results than ONNX Runtime."""
    nan, inf = np.float32("nan"), np.float32("inf")
    x = randn(3, 4)
    x[0, 1], x[1, 2], x[2, 0] = nan, inf, -inf
    y = randn(3, 4)
    y[0, 2], y[1, 1] = nan, nan  # NaN on the second operand's side too
    cases = [Case(f"{op}_nan_inf", [node(op, ["x"], ["y"])], {"x": x}, ["y"]) for op in ("Relu", "HardSigmoid", "Celu")]
    for op in ("Max", "Min"):
        cases.append(Case(f"{op}_nan", [node(op, ["a", "b"], ["y"])], {"a": x, "b": y}, ["y"]))
        cases.append(Case(f"{op}_nan_broadcast", [node(op, ["a", "b"], ["y"])], {"a": x, "b": y[:1]}, ["y"]))
        cases.append(Case(f"{op}3_nan", [node(op, ["a", "b", "c"], ["y"])], {"a": y, "b": x, "c": randn(4)}, ["y"]))
    big = np.array([[inf, -inf, 1e38, -3.0], [5.0, inf, -inf, 0.5]], np.float32)
    cases.append(Case("Clip_no_bounds", [node("Clip", ["x"], ["y"])], {"x": big}, ["y"]))  # FLT_MAX, not inf
    cases.append(Case("Clip_min_only", [node("Clip", ["x", "lo"], ["y"])],
                      {"x": big, "lo": np.array(-1.0, np.float32)}, ["y"], static=("lo",)))
    rows = randn(4, 6)
    rows[1, 0], rows[3, 4] = nan, nan
    for op, reduce in (("ReduceMax", np.max), ("ReduceMin", np.min)):
        for keep in (0, 1):
            # ONNX's reference reduces with numpy: a NaN anywhere in a row is the row's result. ORT keeps it
            # in some positions and row lengths only (first of 4: kept; first of 6: dropped): numpy is the judge.
            cases.append(Case(f"{op}_nan_keepdims{keep}", [node(op, ["x", "a"], ["y"], keepdims=keep)],
                              {"x": rows, "a": np.array([1], np.int64)}, ["y"], static=("a",),
                              expected={"y": reduce(rows, axis=1, keepdims=bool(keep))}))
    wide = np.array([2**32 + 5, 2**40 + 127, -(2**33) - 1, 300, -200, 2**63 - 1], np.int64)
    for to in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT32):
        cases.append(Case(f"Cast_int64_to_{onnx.TensorProto.DataType.Name(to)}", [node("Cast", ["x"], ["y"], to=to)],
                          {"x": wide}, ["y"]))
    # float32's range: ONNX squares in float, so 1e30 squared is inf (the norm inf, the row 0, LayerNorm the bias)
    huge = np.array([[1e30, 1e30, -1e30, 1.0], [1e20, 1.0, 2.0, 3.0], [0.5, -2.0, 3.0, 1.0]], np.float32)
    cases.append(Case("ReduceL2_overflow", [node("ReduceL2", ["x", "a"], ["y"], keepdims=0)],
                      {"x": huge, "a": np.array([1], np.int64)}, ["y"], static=("a",)))
    cases.append(Case("LpNormalization_overflow", [node("LpNormalization", ["x"], ["y"], p=2, axis=-1)], {"x": huge}, ["y"]))
    cases.append(Case("LayerNormalization_overflow", [node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)],
                      {"x": huge, "s": randn(4), "b": randn(4)}, ["y"]))
    for qtype in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8):  # NaN: the lowest code
        zero = np.array(0, helper.tensor_dtype_to_np_dtype(qtype))
        cases.append(Case(f"QuantizeLinear_nan_{onnx.TensorProto.DataType.Name(qtype)}",
                          [node("QuantizeLinear", ["x", "sc", "zp"], ["y"])],
                          {"x": x, "sc": np.array(0.05, np.float32), "zp": zero}, ["y"], static=("sc", "zp")))
    cases.append(Case("LayerNormalization_scale1", [node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)],
                      {"x": randn(3, 8), "s": np.array([1.5], np.float32), "b": randn(8)}, ["y"]))
    cases.append(Case("LayerNormalization_scale_1xD", [node("LayerNormalization", ["x", "s"], ["y"], axis=-2)],
                      {"x": randn(2, 3, 8), "s": randn(1, 8)}, ["y"]))
    return cases


CASES = _priority1() + _priority2() + _priority3() + _special_values()


@dataclass
class Built:
    package: HostPackage
    cases: dict[str, Case]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    for case in CASES:
        case.values = {**run_ort(case), **case.expected}
    spec = FusionSpec("extra.onnx", "0" * 64, "sm8550", tuple(fused_op(c) for c in CASES))
    out = write_tree(render_package(spec), tmp_path_factory.mktemp("extra") / "pkg")
    return Built(HostPackage(build_host(out), spec), {c.name: c for c in CASES})


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_matches_onnxruntime(built: Built, name: str) -> None:
    case = built.cases[name]
    inputs = [case.inputs[n] for n in case.inputs]
    concurrent, _ = built.package.run(case.op_type, inputs, serial=False, trace=False)
    serial, _ = built.package.run(case.op_type, inputs, serial=True, trace=False)
    failures = []
    for out_name, ours, barrier in zip(case.outputs, concurrent, serial):
        why = compare(f"{name}/{out_name}", ours, case.values[out_name])
        if why:
            failures.append(why)
        if not np.array_equal(ours, barrier, equal_nan=True):
            failures.append(f"{name}/{out_name}: serial and concurrent modes differ")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------------------------------
# Refusals: at generation time, one line naming the node

def _spec_of(nodes: list[NodeSpec], tensors: list[TensorSpec], inputs: list[str], outputs: list[str]) -> FusedOp:
    by_name = {t.name: t for t in tensors}
    task = TaskSpec("t0", "vector", tuple(nodes), tuple(inputs), tuple(outputs))
    return FusedOp("HexFuse_r", "HexFuse_r", tuple(by_name[n] for n in inputs), tuple(by_name[n] for n in outputs),
                   (task,), tuple(tensors))


REFUSALS = {
    "float_mod_without_fmod": (
        [NodeSpec("m", "Mod", "", ("a", "b"), ("y",))],
        [TensorSpec("a", "float32", (4,)), TensorSpec("b", "float32", (4,)), TensorSpec("y", "float32", (4,))],
        ["a", "b"], ["y"], "fmod=1"),
    "celu_alpha_zero": (
        [NodeSpec("c", "Celu", "", ("a",), ("y",), {"alpha": 0.0})],
        [TensorSpec("a", "float32", (4,)), TensorSpec("y", "float32", (4,))], ["a"], ["y"], "alpha=0"),
    "where_mixed_dtypes": (
        [NodeSpec("w", "Where", "", ("c", "a", "b"), ("y",))],
        [TensorSpec("c", "uint8", (4,)), TensorSpec("a", "float32", (4,)), TensorSpec("b", "float32", (4,)),
         TensorSpec("y", "float32", (4,))], ["c", "a", "b"], ["y"], "dtype uint8"),
    "sum_bad_broadcast": (
        [NodeSpec("s", "Sum", "", ("a", "b"), ("y",))],
        [TensorSpec("a", "float32", (4, 3)), TensorSpec("b", "float32", (4,)), TensorSpec("y", "float32", (4, 3))],
        ["a", "b"], ["y"], "does not broadcast"),
    "scatter_nd_int_reduction": (
        [NodeSpec("s", "ScatterND", "", ("d", "i", "u"), ("y",), {"reduction": "add"})],
        [TensorSpec("d", "int64", (4, 3)), TensorSpec("i", "int64", (2, 1)), TensorSpec("u", "int64", (2, 3)),
         TensorSpec("y", "int64", (4, 3))], ["d", "i", "u"], ["y"], "float32 only"),
    "pad_unknown_mode": (
        [NodeSpec("p", "Pad", "", ("x", "pads"), ("y",), {"mode": "symmetric"})],
        [TensorSpec("x", "float32", (4,)), TensorSpec("pads", "int64", (2,)), TensorSpec("y", "float32", (6,))],
        ["x", "pads"], ["y"], "mode='symmetric'"),
    "reverse_sequence_axes": (
        [NodeSpec("r", "ReverseSequence", "", ("x", "l"), ("y",), {"batch_axis": 2, "time_axis": 0})],
        [TensorSpec("x", "float32", (4, 3, 2)), TensorSpec("l", "int64", (2,)), TensorSpec("y", "float32", (4, 3, 2))],
        ["x", "l"], ["y"], "must be 0 and 1"),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refused_at_generation(name: str) -> None:
    nodes, tensors, inputs, outputs, why = REFUSALS[name]
    with pytest.raises(HexfuseError) as info:
        plan_fused_op(_spec_of(nodes, tensors, inputs, outputs))
    message = str(info.value)
    assert f"node {nodes[0].name!r} ({nodes[0].op_type})" in message and why in message
    assert "\n" not in message
