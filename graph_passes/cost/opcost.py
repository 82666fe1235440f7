"""What one task costs on each engine, from the shapes and dtypes in its fusion spec.

    matrix op (Conv/MatMul/Gemm)                    vector op (HVX)        dma op
    ┌ DMA   weights + spilled activations in        DMA  spilled in        DMA  copy
    ├ HVX   dequant/pack run-time weights           HVX  compute           (DDR if spilled)
    ├ HMX   MACs / (rate x tile padding efficiency) DMA  spilled out
    ├ HVX   requant / unpack output
    └ DMA   spilled output

Assumptions (documented estimates, refit by calibration): float32 tensors run as fp16 on HTP; a
tensor behind a DequantizeLinear/QuantizeLinear is stored in its quantized type; Q/DQ nodes around
a compute node fold into it; static weights are pre-packed at graph prepare (no HVX at run time) but
fetched from DDR each time; activations up to ``target.resident_mb`` stay in VTCM between ops and
keep HTP's tiled layout (no input packing); HMX outputs need an HVX requant/layout pass; a run-time
weight operand (MatMul of two activations) needs HVX dequant + packing.
Depthwise-style convs (<= 4 input channels per group) run on HVX, as on HTP.
Epilogues the target folds (``target.folds``: BatchNormalization, constant Mul/Add after a matrix op)
cost nothing and dispatch nothing: the converter folds them into the matrix op's weights and bias.
Data movement (Transpose, Concat, Slice, Gather...) runs on HVX: QNN's kernels for it are HVX kernels
(optrace schematics, tools/qnn_engines.py), and so are hexfuse's task ops.

Two views of a task (DESIGN.md section 7, the HTP executor of op_package/htp_expand.py):

    today   as QNN runs the original nodes: one QNN op per compute node, QNN's kernels, its whole
            HVX pool; with an engine map (engine_map.py) each node where QNN runs it: a matrix op on
            HMX or HVX, HVX helpers and DMA moves beside it only where the map lists them, a non-matrix
            node QNN runs no op for (folded into another's kernels, or removed) costs nothing; a matrix
            node without ops of its own keeps its estimate (QNN merged its work into a neighbour's op)
    fused   as the fused op runs it: a matrix task is the same QNN ops (so the same cost); any other
            task is one package task op on HVX (``TaskCost.today`` keeps the first view where it differs)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from hexfuse.graph_passes.cost.target import Target
from hexfuse.graph_passes.engines.engine_map import EngineMap, NodeEngines
from hexfuse.graph_passes.spec.model import FusedOp, NodeSpec, TaskSpec, TensorSpec

_QDQ = {"QuantizeLinear", "DequantizeLinear"}
_FREE = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout", "Shape", "Size", "Constant",
         "ConstantOfShape", "Range", "EyeLike"}
_MATRIX = {"Conv", "ConvInteger", "QLinearConv", "ConvTranspose", "MatMul", "MatMulInteger", "QLinearMatMul", "Gemm"}
_DATAMOVE = {"Transpose", "Concat", "Slice", "Split", "Gather", "GatherElements", "GatherND", "Pad", "Tile", "Expand",
             "ScatterND", "ScatterElements", "DepthToSpace", "SpaceToDepth", "ReverseSequence", "Trilu"}
_TRANSCENDENTAL = {"Exp", "Log", "Sigmoid", "Tanh", "Gelu", "Erf", "Softplus", "Mish", "Pow", "Div", "Reciprocal",
                   "Sqrt", "Sin", "Cos", "Elu", "Selu", "Celu", "HardSwish", "HardSigmoid", "Softsign"}
_NORM = {"LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization", "BatchNormalization",
         "InstanceNormalization", "GroupNormalization", "LpNormalization", "LRN", "MeanVarianceNormalization"}
_SOFTMAX = {"Softmax", "LogSoftmax", "Hardmax"}
_POOL = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool"}
_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
           "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum", "TopK"}
# HVX passes over the data relative to a plain elementwise op (estimate: transcendental via
# polynomial/LUT ~3x, norms read twice + rsqrt, softmax max/exp/sum/scale).
_CLASS_WEIGHT = {"elementwise": 1.0, "transcendental": 3.0, "norm": 3.0, "softmax": 4.0, "pool": 1.0, "reduce": 1.0,
                 "datamove": 1.0, "other": 2.0}  # datamove: one read + one write pass, like a copy
MAX_TILES = 64  # finest cut of one op that the cost model considers


@dataclass(frozen=True)
class OpCost:
    """One node. Times in ns with one HVX context; bytes as stored on HTP."""

    node: str
    op_type: str
    op_class: str
    engine: str  # main engine: "hmx" | "hvx" | "dma" | "none"
    main_ns: float
    pack_ns: float = 0.0  # HVX before HMX: dequant + packing of a run-time weight operand
    requant_ns: float = 0.0  # HVX after HMX
    ddr_in: float = 0.0
    ddr_out: float = 0.0
    vtcm_bytes: float = 0.0  # whole working set
    min_tile_bytes: float = 0.0  # smallest tile's working set
    slices: int = 0  # HVX ops QNN runs its HVX work as (engine map); 0: not measured


@dataclass(frozen=True)
class TaskCost:
    task_id: str
    engine: str  # the task's engine class from the spec: matrix | vector | dma
    main_lane: str  # "hmx" | "hvx" | "dma"
    ops: tuple[OpCost, ...]  # compute nodes only (folded Q/DQ and views dropped)
    main_ns: float
    pack_ns: float
    requant_ns: float
    ddr_in: float
    ddr_out: float
    vtcm_bytes: float
    min_tile_bytes: float
    hvx_ops: int = 0  # of ``ops``, those launched on an HVX thread (a launch/wait pair each)
    slices: int = 0  # the most HVX ops one node's work is cut into (engine map); 0: not measured
    today: TaskCost | None = None  # the task as QNN runs it today, where that differs from the fused view

    @property
    def hvx_side_ns(self) -> float:
        return self.pack_ns + self.requant_ns

    @property
    def dispatches(self) -> int:
        return max(1, len(self.ops))

    @property
    def original(self) -> TaskCost:
        """The task as QNN runs its nodes today (baseline 1)."""
        return self.today or self


def op_class(node: NodeSpec, tensors: dict[str, TensorSpec]) -> str:
    op = node.op_type
    if op in _MATRIX:
        if op.startswith("Conv") or op == "QLinearConv":
            return "depthwise" if _is_depthwise(node, tensors) else "conv"
        return "matmul"
    for names, cls in ((_DATAMOVE, "datamove"), (_TRANSCENDENTAL, "transcendental"), (_NORM, "norm"),
                       (_SOFTMAX, "softmax"), (_POOL, "pool"), (_REDUCE, "reduce")):
        if op in names:
            return cls
    return "elementwise" if op not in _FREE else "other"


def _weight_name(node: NodeSpec) -> str:
    return node.inputs[3] if node.op_type in ("QLinearConv", "QLinearMatMul") else node.inputs[1]


def _is_depthwise(node: NodeSpec, tensors: dict[str, TensorSpec]) -> bool:
    group = int(node.attributes.get("group", 1))
    weight = tensors.get(_weight_name(node))
    return group > 1 and weight is not None and len(weight.shape) > 1 and weight.shape[1] <= 4


class Storage:
    """Bytes per element and static-ness of tensors as HTP stores them (through Q/DQ aliases inside a
    task, and through the encoding a port carries where a DQ / Q outside it folds into it: ``wire``)."""

    def __init__(self, op: FusedOp):
        self.tensors = {t.name: t for t in op.tensors}
        self.ports = {t.name: t for t in (*op.inputs, *op.outputs) if t.wire is not None}
        self.alias: dict[str, str] = {}
        for task in op.tasks:
            for node in task.nodes:
                if node.op_type == "DequantizeLinear" and node.outputs:
                    self.alias[node.outputs[0]] = node.inputs[0]
                elif node.op_type == "QuantizeLinear" and node.outputs:
                    self.alias[node.inputs[0]] = node.outputs[0]

    def _root(self, name: str) -> TensorSpec | None:
        seen = 0
        while name in self.alias and seen < 4:
            name, seen = self.alias[name], seen + 1
        return self.tensors.get(name)

    def itemsize(self, name: str) -> int:
        port = self.ports.get(name) if name not in self.alias else None
        if port is not None:  # QNN hands the kernel the quantized tensor (weights and activations alike)
            return np.dtype(port.wire.dtype).itemsize  # type: ignore[union-attr]
        tensor = self._root(name)
        if tensor is None:
            return 0
        if tensor.quant is not None:
            return np.dtype(tensor.quant.dtype).itemsize
        if tensor.dtype in ("float32", "float64"):
            return 2  # HTP runs float graphs in fp16
        try:
            return np.dtype(tensor.dtype).itemsize
        except TypeError:
            return 2

    def nbytes(self, name: str) -> float:
        tensor = self.tensors.get(name)
        if not name or tensor is None or not tensor.shape:
            return 0.0
        return float(math.prod(tensor.shape)) * self.itemsize(name)

    def static(self, name: str) -> bool:
        port = self.ports.get(name) if name not in self.alias else None
        if port is not None and port.static:  # a DQ(initializer) port: quantized weights
            return True
        tensor = self._root(name)
        return bool(tensor and tensor.static)

    def shape(self, name: str) -> tuple[int, ...]:
        tensor = self.tensors.get(name)
        return tensor.shape if tensor is not None else ()


def _spilled(target: Target, nbytes: float) -> float:
    return nbytes if nbytes > target.resident_bytes else 0.0


def _side_work(facts: NodeEngines | None, pack: float, requant: float) -> tuple[float, float]:
    """HVX work beside a matrix kernel: where the engine map lists QNN's HVX helpers, only the kinds it
    lists (weight/scale conversions -> pack, layout moves -> requant); without a map, the estimates."""
    if facts is None or not facts.kernels:
        return pack, requant
    helpers = facts.side_kernels("hvx")
    return (pack if any(k.role == "compute" for k in helpers) else 0.0,
            requant if any(k.role == "move" for k in helpers) else 0.0)


def _matrix_cost(node: NodeSpec, cls: str, st: Storage, target: Target, facts: NodeEngines | None = None) -> OpCost:
    out = node.outputs[0]
    weight = _weight_name(node)
    act = node.inputs[3 if node.op_type == "QLinearMatMul" else 0]
    out_shape, w_shape, a_shape = st.shape(out), st.shape(weight), st.shape(act)
    if not out_shape or not w_shape or not a_shape:
        return OpCost(node.name, node.op_type, cls, "none", 0.0)
    if node.op_type.startswith("Conv") or node.op_type == "QLinearConv":
        macs = math.prod(out_shape) * math.prod(w_shape[1:])
        k_dim, n_dim = w_shape[1], w_shape[0] // max(1, int(node.attributes.get("group", 1)))
        rows = out_shape[0] * (out_shape[2] if len(out_shape) > 2 else 1)
    else:
        k_dim, n_dim = a_shape[-1], out_shape[-1]
        macs = math.prod(out_shape) * k_dim
        rows = math.prod(out_shape[:-1])
    a_bytes, w_bytes, o_bytes = st.nbytes(act), st.nbytes(weight), st.nbytes(out)
    wide = max(st.itemsize(act), st.itemsize(weight)) > 1
    # Conv/Gemm weights are constants even in old models that also list initializers as graph inputs
    prepacked = st.static(weight) or node.op_type != "MatMul" and "MatMul" not in node.op_type
    clock = target.clock_ghz
    on_hvx = cls == "depthwise" if facts is None or not facts.kernels else facts.resource == "hvx"
    if on_hvx:  # depthwise by the rules; any matrix op the engine map finds on an HVX kernel (fp32 MatMul_bias)
        main = macs / (target.hvx_int8_macs_per_cycle * clock) * (2.0 if wide else 1.0)
        engine = "hvx"
        pack, requant = _side_work(facts, 0.0 if prepacked else w_bytes / (target.dequant_bytes_per_cycle * clock), 0.0)
    else:
        tile = target.hmx_tile
        padding = (k_dim / (math.ceil(k_dim / tile) * tile)) * (n_dim / (math.ceil(n_dim / tile) * tile))
        rate = target.hmx_fp16_macs_per_cycle if wide else target.hmx_int8_macs_per_cycle
        main = macs / (rate * clock) / max(padding, 1e-3)
        engine = "hmx"
        # activations stay in HTP's tiled layout between ops; a run-time weight operand (attention's
        # K/V, MoE expert inputs) must be dequantized/transposed/packed by HVX before HMX can read it
        pack = 0.0 if prepacked else w_bytes / (target.dequant_bytes_per_cycle * clock)
        requant = o_bytes / (target.pack_bytes_per_cycle * clock)  # HMX accumulators -> output type/layout
        pack, requant = _side_work(facts, pack, requant)
    ddr_in = (w_bytes if prepacked else _spilled(target, w_bytes)) + _spilled(target, a_bytes)
    whole = a_bytes + w_bytes + o_bytes
    by_rows = w_bytes + (a_bytes + o_bytes) / max(1, min(MAX_TILES, rows))
    by_cols = a_bytes + (w_bytes + o_bytes) / max(1, min(MAX_TILES, math.ceil(n_dim / target.hmx_tile)))
    factor = target.factor(cls)
    return OpCost(node.name, node.op_type, cls, engine, main * factor, pack, requant, ddr_in,
                  _spilled(target, o_bytes), whole, min(whole, by_rows, by_cols),
                  facts.hvx_slices if facts is not None and engine == "hvx" else 0)


def _pool_weight(node: NodeSpec) -> float:
    kernel = node.attributes.get("kernel_shape")
    strides = node.attributes.get("strides") or (1,) * len(kernel or ())
    if not kernel:
        return 1.0
    return max(1.0, math.prod(kernel) / max(1, math.prod(strides)))


def _stream_cost(node: NodeSpec, cls: str, st: Storage, target: Target, on_dma: bool = False) -> OpCost:
    """``on_dma``: QNN issues this node's movement on the DMA engine (the engine map says so)."""
    ins = [st.nbytes(name) for name in node.inputs if name and not st.static(name)]
    outs = [st.nbytes(name) for name in node.outputs if name]
    moved = sum(ins) + sum(outs)
    if on_dma:
        engine, main = "dma", sum(outs) / target.dma_bytes_per_ns
    else:
        weight = _pool_weight(node) if cls == "pool" else _CLASS_WEIGHT.get(cls, 1.0)
        engine, main = "hvx", moved * weight * target.hvx_ns_per_byte
    ddr_in = sum(_spilled(target, b) for b in ins)
    ddr_out = sum(_spilled(target, b) for b in outs)
    rows = max((st.shape(name)[0] * (st.shape(name)[1] if len(st.shape(name)) > 1 else 1)
                for name in node.outputs if st.shape(name)), default=1)
    return OpCost(node.name, node.op_type, cls, engine, main * target.factor(cls), 0.0, 0.0, ddr_in, ddr_out,
                  moved, moved / max(1, min(MAX_TILES, rows)))


def node_cost(node: NodeSpec, st: Storage, target: Target, facts: NodeEngines | None = None) -> OpCost | None:
    """Cost of one node, or None when it costs nothing (views, Q/DQ folded into a compute node, a node
    QNN folds into another). ``facts``: the engine map's entry, for the node as QNN runs it today."""
    if node.op_type in _FREE or node.domain not in ("", "ai.onnx"):
        return None
    cls = op_class(node, st.tensors)
    if node.op_type in _MATRIX:
        return _matrix_cost(node, cls, st, target, facts)
    if facts is not None and not facts.kernels:
        return None  # QNN runs no op of its own for it: folded into another node's kernels, or removed
    cost = _stream_cost(node, cls, st, target, on_dma=facts is not None and facts.resource == "dma")
    return replace(cost, slices=facts.hvx_slices) if facts is not None and cost.engine == "hvx" else cost


def combine(task_id: str, engine: str, ops: tuple[OpCost, ...]) -> TaskCost:
    """Nodes of one task run one after another; their costs add, their working sets do not."""
    lanes = {c.engine for c in ops if c.engine != "none"}
    if "hmx" in lanes:
        main_lane = "hmx"
    elif lanes:
        main_lane = min(lanes) if len(lanes) == 1 else "hvx"
    else:
        main_lane = {"matrix": "hmx", "vector": "hvx", "dma": "dma"}.get(engine, "hvx")
    # e.g. a depthwise conv beside a dense one: work off the main lane runs as HVX side work
    side = sum(c.main_ns for c in ops if c.engine not in (main_lane, "none"))
    return TaskCost(
        task_id, engine, main_lane, ops,
        main_ns=sum(c.main_ns for c in ops if c.engine == main_lane),
        pack_ns=sum(c.pack_ns for c in ops) + side,
        requant_ns=sum(c.requant_ns for c in ops),
        ddr_in=sum(c.ddr_in for c in ops), ddr_out=sum(c.ddr_out for c in ops),
        vtcm_bytes=max((c.vtcm_bytes for c in ops), default=0.0),
        min_tile_bytes=max((c.min_tile_bytes for c in ops), default=0.0),
        hvx_ops=sum(1 for c in ops if c.engine == "hvx"),
        slices=max((c.slices for c in ops), default=0),
    )


def compute_nodes(task: TaskSpec) -> list[NodeSpec]:
    """Nodes that cost time: Q/DQ fold into compute nodes unless the task is only Q/DQ."""
    computes = [n for n in task.nodes if n.op_type not in _QDQ and n.op_type not in _FREE]
    return computes if computes else [n for n in task.nodes if n.op_type in _QDQ]


def folded_epilogues(task: TaskSpec, target: Target) -> set[int]:
    """Positions in ``task.nodes`` of epilogues the target folds into the matrix op before them
    (BatchNormalization, constant Mul/Add: graph_passes/graph/folds.py put them into the matrix task)."""
    if task.engine != "matrix" or not target.folds:
        return set()
    hosted: set[str] = set()  # tensors a matrix op or a folded epilogue produces
    folded = set()
    for position, node in enumerate(task.nodes):
        if node.op_type in _MATRIX or (node.op_type in target.folds and any(name in hosted for name in node.inputs)):
            hosted.update(name for name in node.outputs if name)
            if node.op_type not in _MATRIX:
                folded.add(position)
    return folded


def task_cost(task: TaskSpec, op: FusedOp, target: Target, storage: Storage | None = None,
              engines: EngineMap | None = None) -> TaskCost:
    """Both views of the task (module docstring); ``engines``: the model's engine map, if any."""
    st = storage or Storage(op)
    folded = {id(task.nodes[i]) for i in folded_epilogues(task, target)}
    nodes = [n for n in compute_nodes(task) if id(n) not in folded]

    def priced(with_map: bool) -> TaskCost:
        facts = (lambda n: engines.node(n.name)) if with_map and engines is not None else (lambda n: None)
        ops = tuple(c for c in (node_cost(n, st, target, facts(n)) for n in nodes) if c is not None)
        return combine(task.id, task.engine, ops)

    today = priced(True)
    if task.engine == "matrix" or engines is None:
        return today  # QNN's own ops either way (or no map: the rules price both views alike)
    fused = priced(False)
    return fused if fused == today else replace(fused, today=today)


def task_costs(op: FusedOp, target: Target, engines: EngineMap | None = None) -> list[TaskCost]:
    storage = Storage(op)
    return [task_cost(task, op, target, storage, engines) for task in op.tasks]
