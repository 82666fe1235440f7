"""A matrix task as QNN's own ops: the replacement expressions of the HTP optimization rules.

On HTP the matrix work of a fused op must run on QNN's kernels (HMX where QNN uses it), never on
ours. The package's rules rewrite the fused op at prepare (pass GRAPH_CLEANUP, where QNN's own
translation still lowers ``QNN_*`` ops) into an expression of QNN-level ops per output, written in
the HTP optimization grammar. The input lists follow what the QNN EP itself emits for these ops
(read from optrace schematics of the original models, DESIGN.md section 5):

    MatMul  QNN_MatMul(a, b, zero bias[N], transpose_in0, transpose_in1)
    Gemm    QNN_MatMul(a, b, c or zero bias[N], transA, transB)            alpha = beta = 1 only
    Conv    QNN_Transpose(QNN_Conv2d(QNN_Transpose(x, NHWC), QNN_Transpose(w, HWIO), bias,
                                     stride, pad_amount, group, dilation), NCHW)
    Add / Mul by a constant (an epilogue the target folds, graph_passes/graph/folds.py)
            QNN_ElementWiseAdd / QNN_ElementWiseMultiply(x, c)
    BatchNormalization (inference, folded after a Conv)
            x * w + b per channel, w and b computed from the four constants by QNN elementwise ops
    Reshape / Flatten / Squeeze / Unsqueeze / Identity   QNN_Reshape(x)
    QuantizeLinear / DequantizeLinear                     nothing: the encoding rides on the tensor

The one constant the grammar cannot spell, Conv2d's [2, 2] pad_amount, comes from a C++ helper
(runtime/src/htp/replace_helpers.h). HTP tensors are 4-D (lower ranks are backfilled with leading 1s). Every op built carries its size and
encoding explicitly (WITH_SIZE, WITH_OUTPUT_TYPE): by default a replacement op would take the rule's
root output type, which is wrong for every inner op. A node this module cannot express makes the
whole fused op unexpandable; ``MatrixTranslation.reason`` says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from hexfuse.graph_passes.spec.model import FusedOp, NodeSpec, QuantSpec, TaskSpec

QNN_MATRIX_OPS = frozenset({"MatMul", "Gemm", "Conv"})  # the capability the pass learns for HTP targets
_VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
_HTP_DTYPES = {"uint8": "DType::QUInt8", "int8": "DType::QInt8", "uint16": "DType::QUInt16",
               "int16": "DType::QInt16", "int32": "DType::QInt32"}


def default_op(name: str) -> str:
    return f'FROM_DEFAULT_PACKAGE("{name}")'


def input_tag(index: int) -> str:
    return f'"in_{index}"'


def _float_literal(value: float) -> str:
    text = repr(float(value))
    return text + "f" if ("." in text or "e" in text) else text + ".0f"


class Untranslatable(Exception):
    """A node QNN's own ops cannot take over here; the message is the reason."""


def shape4(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    if len(shape) > 4:
        raise Untranslatable(f"rank {len(shape)} is above HTP's 4")
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    return padded  # type: ignore[return-value]


@dataclass(frozen=True)
class MatrixTranslation:
    outputs: dict[str, str]  # fused output tensor name -> replacement expression
    reason: str | None = None


class _Translator:
    def __init__(self, op: FusedOp, task: TaskSpec, through: dict[str, str] | None = None):
        self.op = op
        self.task = task
        self.tensors = {t.name: t for t in op.tensors}
        for t in (*op.inputs, *op.outputs):
            self.tensors[t.name] = t
        self.inputs = {t.name: i for i, t in enumerate(op.inputs)}
        # `through`: inputs read through another expression (the entry op, htp_expand.py)
        self.exprs: dict[str, str] = {name: input_tag(i) for name, i in self.inputs.items()} | (through or {})
        self.consumers: dict[str, list[NodeSpec]] = {}
        for node in task.nodes:
            for name in node.inputs:
                self.consumers.setdefault(name, []).append(node)

    # --- encodings -------------------------------------------------------------------------------
    def encoding(self, name: str) -> QuantSpec | None:
        """The quantization a float tensor has on HTP: the Q reading it, the DQ writing it, or its port's."""
        tensor = self.tensors[name]
        if tensor.wire is not None:
            return tensor.wire
        for node in self.consumers.get(name, ()):
            if node.op_type == "QuantizeLinear" and node.inputs[0] == name:
                return self.tensors[node.outputs[0]].quant
        for node in self.task.nodes:
            if node.op_type == "DequantizeLinear" and node.outputs[0] == name:
                return self.tensors[node.inputs[0]].quant
        return tensor.quant

    def output_type(self, name: str) -> str:
        tensor = self.tensors[name]
        quant = self.encoding(name)
        if quant is None:
            if tensor.dtype != "float32":
                raise Untranslatable(f"tensor {name!r} of type {tensor.dtype} has no HTP encoding here")
            return "DType::Float32, 0, 1.0f"
        if len(quant.scale) != 1:
            raise Untranslatable(f"tensor {name!r} is quantized per axis (HTP takes per-channel scales only "
                                 "through the per-channel op path, not used here)")
        if quant.dtype not in _HTP_DTYPES:
            raise Untranslatable(f"tensor {name!r} is quantized as {quant.dtype}")
        return f"{_HTP_DTYPES[quant.dtype]}, {int(quant.zero_point[0])}, {_float_literal(quant.scale[0])}"

    def is_quantized(self, name: str) -> bool:
        return self.encoding(name) is not None

    def built(self, name: str, shape: tuple[int, ...], op_expr: str) -> str:
        """An op construction with the size and encoding of tensor ``name`` (shape given in 4-D)."""
        dims = ", ".join(str(d) for d in shape)
        return f"WITH_SIZE(gen_Shape({dims}), WITH_OUTPUT_TYPE({self.output_type(name)}, {op_expr}))"

    def expr(self, name: str) -> str:
        if name not in self.exprs:
            raise Untranslatable(f"tensor {name!r} is neither a fused-op input nor computed earlier in the task")
        return self.exprs[name]

    def static_input(self, name: str, what: str) -> str:
        if name not in self.inputs or not self.tensors[name].static:
            raise Untranslatable(f"the {what} {name!r} is not a constant input of the fused op")
        return input_tag(self.inputs[name])

    # --- nodes -----------------------------------------------------------------------------------
    def node(self, node: NodeSpec) -> None:
        if node.domain not in ("", "ai.onnx"):
            raise Untranslatable(f"{node.op_type} {node.name!r} is not an ONNX op")
        handler = getattr(self, f"_{node.op_type}", None)
        if handler is None and node.op_type in _VIEWS:
            handler = self._view
        if handler is None:
            raise Untranslatable(f"{node.op_type} {node.name!r} has no QNN translation in hexfuse")
        handler(node)

    def _QuantizeLinear(self, node: NodeSpec) -> None:  # noqa: N802  (ONNX op names)
        self.exprs[node.outputs[0]] = self.expr(node.inputs[0])

    def _DequantizeLinear(self, node: NodeSpec) -> None:  # noqa: N802
        self.exprs[node.outputs[0]] = self.expr(node.inputs[0])

    def _view(self, node: NodeSpec) -> None:
        out = node.outputs[0]
        self.exprs[out] = self.built(out, shape4(self.tensors[out].shape),
                                     f"Op({default_op('QNN_Reshape')}, {self.expr(node.inputs[0])})")

    def _zero_bias(self, out: str, n: int) -> str:
        return f"gen_ConstArr_i32(0, {n})" if self.is_quantized(out) else f"gen_ConstArr_f32(0.0f, {n})"

    def _MatMul(self, node: NodeSpec) -> None:  # noqa: N802
        a, b, out = (self.tensors[n] for n in (*node.inputs[:2], node.outputs[0]))
        if len(a.shape) < 2 or len(b.shape) < 2:
            raise Untranslatable(f"MatMul {node.name!r} has a 1-D operand")
        n = b.shape[-1]
        self.exprs[out.name] = self.built(out.name, shape4(out.shape), (
            f"Op({default_op('QNN_MatMul')}, {self.expr(a.name)}, {self.expr(b.name)}, "
            f"{self._zero_bias(out.name, n)}, gen_ConstScalar_i32(0), gen_ConstScalar_i32(0))"))

    def _Gemm(self, node: NodeSpec) -> None:  # noqa: N802
        attrs = node.attributes
        if float(attrs.get("alpha", 1.0)) != 1.0 or float(attrs.get("beta", 1.0)) != 1.0:
            raise Untranslatable(f"Gemm {node.name!r} scales by alpha/beta")
        out = self.tensors[node.outputs[0]]
        trans_b = int(attrs.get("transB", 0))
        b = self.tensors[node.inputs[1]]
        n = b.shape[0] if trans_b else b.shape[1]
        if len(node.inputs) > 2 and node.inputs[2]:
            c = self.tensors[node.inputs[2]]
            if tuple(c.shape) not in ((n,), (1, n)):
                raise Untranslatable(f"Gemm {node.name!r} adds a C of shape {list(c.shape)} (a bias of [N] only)")
            bias = self.expr(c.name)
        else:
            bias = self._zero_bias(out.name, n)
        self.exprs[out.name] = self.built(out.name, shape4(out.shape), (
            f"Op({default_op('QNN_MatMul')}, {self.expr(node.inputs[0])}, {self.expr(b.name)}, {bias}, "
            f"gen_ConstScalar_i32({int(attrs.get('transA', 0))}), gen_ConstScalar_i32({trans_b}))"))

    def _elementwise(self, node: NodeSpec, qnn_op: str) -> None:
        """An epilogue folded into the matrix task (graph_passes/graph/folds.py): one operand constant."""
        a, b = node.inputs[:2]
        if sum(1 for name in (a, b) if name in self.inputs and self.tensors[name].static) != 1:
            raise Untranslatable(f"{node.op_type} {node.name!r} in a matrix task needs exactly one constant operand")
        out = node.outputs[0]
        self.exprs[out] = self.built(out, shape4(self.tensors[out].shape),
                                     f"Op({default_op(qnn_op)}, {self.expr(a)}, {self.expr(b)})")

    def _Add(self, node: NodeSpec) -> None:  # noqa: N802
        self._elementwise(node, "QNN_ElementWiseAdd")

    def _Mul(self, node: NodeSpec) -> None:  # noqa: N802
        self._elementwise(node, "QNN_ElementWiseMultiply")

    def _BatchNormalization(self, node: NodeSpec) -> None:  # noqa: N802
        """Inference BN, an epilogue folded after a Conv: y = x * w + b per channel, where
        w = scale * rsqrt(var + epsilon) and b = B - mean * w are ops on constants (QNN folds them)."""
        if int(node.attributes.get("training_mode", 0)) or len(node.outputs) > 1:
            raise Untranslatable(f"BatchNormalization {node.name!r} is in training mode")
        x, out = self.tensors[node.inputs[0]], node.outputs[0]
        if len(x.shape) < 2 or self.is_quantized(out):
            raise Untranslatable(f"BatchNormalization {node.name!r} is not a float per-channel norm")
        scale, bias, mean, var = (self.static_input(name, f"BatchNormalization {what}")
                                  for name, what in zip(node.inputs[1:5], ("scale", "B", "mean", "var")))
        channels = x.shape[1]
        flat = shape4((channels,))
        per_channel = shape4((1, channels) + (1,) * (len(x.shape) - 2))

        def const_op(qnn_op: str, *args: str) -> str:
            return self.built(out, flat, f"Op({default_op(qnn_op)}, {', '.join(args)})")

        def to_channel_axis(expr: str) -> str:
            return self.built(out, per_channel, f"Op({default_op('QNN_Reshape')}, {expr})")

        epsilon = _float_literal(node.attributes.get("epsilon", 1e-5))
        weight = const_op("QNN_ElementWiseMultiply", scale, const_op(
            "QNN_ElementWiseRsqrt", const_op("QNN_ElementWiseAdd", var, f"gen_ConstScalar_f32({epsilon})")))
        shift = const_op("QNN_ElementWiseSubtract", bias, const_op("QNN_ElementWiseMultiply", mean, weight))
        shape = shape4(self.tensors[out].shape)
        scaled = self.built(out, shape, f"Op({default_op('QNN_ElementWiseMultiply')}, {self.expr(x.name)}, "
                                         f"{to_channel_axis(weight)})")
        self.exprs[out] = self.built(out, shape, f"Op({default_op('QNN_ElementWiseAdd')}, {scaled}, "
                                                 f"{to_channel_axis(shift)})")

    def _Conv(self, node: NodeSpec) -> None:  # noqa: N802
        attrs = node.attributes
        x, w, out = self.tensors[node.inputs[0]], self.tensors[node.inputs[1]], self.tensors[node.outputs[0]]
        if len(x.shape) != 4:
            raise Untranslatable(f"Conv {node.name!r} is not 2-D")
        if int(attrs.get("group", 1)) != 1:
            raise Untranslatable(f"Conv {node.name!r} is grouped (QNN expresses it as another op)")
        auto_pad = attrs.get("auto_pad", "NOTSET")
        if auto_pad not in ("NOTSET", "VALID"):
            raise Untranslatable(f"Conv {node.name!r} has auto_pad={auto_pad}")
        top, left, bottom, right = (attrs.get("pads", (0, 0, 0, 0)) if auto_pad == "NOTSET" else (0, 0, 0, 0))
        stride_h, stride_w = attrs.get("strides", (1, 1))
        dil_h, dil_w = attrs.get("dilations", (1, 1))
        n, c, h, wd = x.shape
        cout, cin, kh, kw = w.shape
        _, _, ho, wo = out.shape
        nhwc = self.built(x.name, (n, h, wd, c), f"Op({default_op('QNN_Transpose')}, {self.expr(x.name)}, "
                                                  "gen_ConstArr_vals_i32(0, 2, 3, 1))")
        w_tag = self.static_input(w.name, "Conv weight")
        hwio = (f"WITH_SIZE(gen_Shape({kh}, {kw}, {cin}, {cout}), WITH_TYPE({w_tag}, "
                f"Op({default_op('QNN_Transpose')}, {w_tag}, gen_ConstArr_vals_i32(2, 3, 1, 0))))")
        if len(node.inputs) > 2 and node.inputs[2]:
            bias = self.static_input(node.inputs[2], "Conv bias")
        else:
            bias = self._zero_bias(out.name, cout)
        conv = self.built(out.name, (n, ho, wo, cout), (
            f"Op({default_op('QNN_Conv2d')}, {nhwc}, {hwio}, {bias}, gen_ConstArr_vals_i32({stride_h}, {stride_w}), "
            f"hexfuse_htp::const_i32_2x2({top}, {bottom}, {left}, {right}), "
            f"gen_ConstArr_vals_i32(1), gen_ConstArr_vals_i32({dil_h}, {dil_w}))"))
        self.exprs[out.name] = self.built(out.name, (n, cout, ho, wo), f"Op({default_op('QNN_Transpose')}, {conv}, "
                                                                       "gen_ConstArr_vals_i32(0, 3, 1, 2))")


def with_output_def(op: FusedOp, name: str, expr: str) -> str | None:
    """``expr`` with the size and encoding of fused-op output ``name`` spelt out (None where HTP has no
    encoding for it here). A copy of an op nested in another rule must carry its own output def: left
    implicit it takes the def of the output the enclosing rule replaces."""
    task = next(t for t in op.tasks if name in t.outputs)
    translator = _Translator(op, task)
    try:
        return translator.built(name, shape4(translator.tensors[name].shape), expr)
    except Untranslatable:
        return None


def input_def(op: FusedOp, index: int, expr: str) -> str:
    """``expr`` with the size and type of fused-op input ``index`` (a pass-through of that input)."""
    dims = ", ".join(str(d) for d in shape4(op.inputs[index].shape))
    return f"WITH_SIZE(gen_Shape({dims}), WITH_TYPE({input_tag(index)}, {expr}))"


def translate_matrix_task(op: FusedOp, task: TaskSpec, through: dict[str, str] | None = None) -> MatrixTranslation:
    """Replacement expressions for every fused output the matrix task produces, or the reason it can't.
    ``through``: fused-op input name -> the expression the task reads it through (default: the input)."""
    translator = _Translator(op, task, through)
    try:
        for node in task.nodes:
            translator.node(node)
        outputs = {t.name: translator.expr(t.name) for t in op.outputs if t.name in task.outputs}
    except Untranslatable as why:
        return MatrixTranslation({}, str(why))
    return MatrixTranslation(outputs)

