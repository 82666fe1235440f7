"""Decoder layers in the form Qualcomm deploys LLMs on HTP (issue 43), for any Llama-family model of a Hugging Face
``config.json``. The legacy form of tools/realsize.py (``Layer``) expands K and V across the query heads over the
whole cache, transposes the whole K cache every token, takes float KV in and gives the whole cache back; none of
that is in the graphs users run (quic/ai-hub-models ``_shared/llm``, ``llama3/model_adaptations.py``: attention
per head, K cache stored transposed, the group's K/V shared by its query heads without a copy, 8-bit KV in, only the
new token's K/V out). This form, for T new tokens over P cached ones (S = P + T; KV head j serves query
heads j*r .. j*r + r - 1, r = heads / kv_heads):

    x ─┬─ RMSNorm ─┬─ Wk_j ─ RoPE ─ Transpose ─ new_k_j [1, d, T] (uint8 out) ─┐
       │           │                 past_k_j uint8 [1, d, P] ─ DQ ─ Concat ─ K^T_j [1, d, S]
       │           ├─ Wv_j ─ new_v_j [1, T, d] (uint8 out) ─┐                   │
       │           │         past_v_j uint8 [1, P, d] ─ DQ ─ Concat ─ V_j [1, S, d]
       │           └─ Wq_i ─ RoPE ─ MatMul(K^T_j) ─ x 1/sqrt(d) ─ + mask [T, S] ─ Softmax ─ MatMul(V_j) ─┐
       │                                                       per query head i, [1, T, d] ─ Concat ─ Wo ─┐
       └────────────────────────────────────────────────────────────────────────────────────────────── Add ─ r
    r ─ RMSNorm ─ SwiGLU MLP ─ Add ─ y

Per head, as ai-hub-models' SHA: a head's scores at a 128-token prompt over a 4096 cache are 1 MB and stay in VTCM
(batched over the KV groups they were 33 MB per layer for Llama-3.2-1B, and QNN's schedule moved ~500 MB of spills
through DDR per layer). Nothing is expanded or copied across the query heads of a group; the K cache is never
transposed; the mask is an input (as deployed: the graph has one static context and masks what is not filled).
Quantized as tools/realsize.py quantizes (w8a8 / w8a16 / w4a16); then the KV ports become 8-bit (``uint8`` graph
inputs read by their DequantizeLinear, the new K/V given as the QuantizeLinear's ``uint8``), whatever the
activations' width. The LM head (final norm + vocabulary projection) is ``LmHead``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hexfuse.graph_passes.errors import HexfuseError

SCHEMA = 4  # 4: the cache stays 8-bit through its Concat; (grouped attention adds "grouped" to the key) 3: no Transpose on the way to new K; 2: attention split per head (1: batched over KV groups, whose prefill scores spilled to DDR)
MODES = ("prefill", "decode")
KV_PORTS = ("past_k", "past_v")  # inputs made uint8
KV_OUTPUTS = ("new_k", "new_v")  # outputs made uint8
MASK_VALUE = -100.0
ATTENTION = ("auto", "per_head", "grouped")
GROUPED_MAX_BYTES = 2 * 2**20  # a quarter of the 8 MB VTCM of v73-v79 phones (DESIGN.md section 7)


def _realsize():  # (realsize imports this module; the constants come from it at call time)
    from hexfuse.tools import realsize

    return realsize


@dataclass(frozen=True)
class DeployedLayer:
    """``size``: the new tokens T at prefill, the cached tokens P at decode (T = 1). ``past``: the cached tokens
    a prompt pass attends to as well (a deployed prompt processor of context C reads C - T of them, masked or not)."""

    config: object  # realsize.Config
    mode: str
    size: int
    precision: str = "w4a16"
    past: int = 0
    attention_only: bool = False
    layers: int = 1
    attention: str = "auto"  # per_head | grouped (batched over the KV heads; one new token only) | auto: grouped at
    # decode while the cache fits (``grouped``; 12k -> 5k QNN ops for Llama-3.2-1B at KV 4095), else per head

    def __post_init__(self) -> None:
        rs = _realsize()
        if self.attention not in ATTENTION:
            raise HexfuseError(f"realsize: attention must be one of {ATTENTION}, got {self.attention!r}")
        if self.attention == "grouped" and self.mode == "prefill" and self.size > 1:
            raise HexfuseError("realsize: grouped attention takes one new token (decode); a prompt pass is per head")
        if self.mode not in MODES:
            raise HexfuseError(f"realsize: mode must be one of {MODES}, got {self.mode!r}")
        if self.precision not in rs.PRECISIONS:
            raise HexfuseError(f"realsize: precision must be one of {rs.PRECISIONS}, got {self.precision!r}")
        if self.size < 1 or self.past < 0 or self.layers < 1:
            raise HexfuseError(f"realsize: size and layers must be positive and past not negative, got size "
                               f"{self.size}, past {self.past}, layers {self.layers}")
        if self.mode == "decode" and self.past:
            raise HexfuseError("realsize: a decode layer's cache is its size (past is for prefill)")
        c = self.config
        if c.heads % c.kv_heads:
            raise HexfuseError(f"realsize: {c.name}: {c.heads} query heads are not a multiple of {c.kv_heads} KV heads")

    @property
    def tokens(self) -> int:
        return self.size if self.mode == "prefill" else 1

    @property
    def cached(self) -> int:
        """P: the tokens in the KV cache the layer reads."""
        return self.past if self.mode == "prefill" else self.size

    @property
    def keys(self) -> int:
        return self.cached + self.tokens

    @property
    def grouped(self) -> bool:
        """Grouped where asked, or at decode (auto) while one layer's 8-bit K cache fits a quarter of VTCM: batched
        over the KV heads, the cache's concat with the new token is one tensor, which QNN spills through DDR once
        it outgrows VTCM (Phi-3.5-mini, 32 KV heads at 4096 tokens: 12.6 MB, 210 MB of spills per layer); per
        head it is 0.4 MB a head."""
        c = self.config
        fits = c.kv_heads * c.head_dim * self.keys <= GROUPED_MAX_BYTES
        return self.attention == "grouped" or (self.attention == "auto" and self.tokens == 1 and fits)

    @property
    def opset(self) -> int:
        return _realsize().opset_for(self.precision)

    @property
    def stem(self) -> str:
        tail = (f"_p{self.past}" if self.past else "") + ("_attn" if self.attention_only else "") \
            + (f"_x{self.layers}" if self.layers > 1 else "") + ("" if self.attention == "auto" else f"_{self.attention}")
        return f"{self.config.name}_{self.mode}{self.size}_{self.precision}{tail}_deployed"

    @property
    def key(self) -> str:
        rs = _realsize()
        fields = {"schema": SCHEMA, "form": "deployed", "config": asdict(self.config), "mode": self.mode,
                  "size": self.size, "past": self.past, "precision": self.precision, "seed": rs.SEED,
                  "calib": rs.CALIB_SAMPLES, "attention_only": self.attention_only, "layers": self.layers}
        if self.grouped:
            fields["grouped"] = True
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    def inputs(self) -> dict[str, tuple[int, ...]]:
        c, T, P = self.config, self.tokens, self.cached
        shapes: dict[str, tuple[int, ...]] = {"x": (1, T, c.hidden), "attention_mask": (T, self.keys)}
        if P and self.grouped:  # one cache per layer, the KV heads its batch
            for i in range(self.layers):
                shapes[f"past_k{_suffix(i)}"] = (c.kv_heads, c.head_dim, P)
                shapes[f"past_v{_suffix(i)}"] = (c.kv_heads, P, c.head_dim)
        elif P:
            for i in range(self.layers):
                for j in range(c.kv_heads):  # one cache per KV head, as deployed
                    shapes[f"past_k{_suffix(i)}_h{j}"] = (1, c.head_dim, P)
                    shapes[f"past_v{_suffix(i)}_h{j}"] = (1, P, c.head_dim)
        return shapes

    def feeds(self, seed: int) -> dict[str, np.ndarray]:
        """Float inputs (calibration, CPU checks): a causal mask over the cache and the new tokens."""
        rng = np.random.default_rng(seed)
        out = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in self.inputs().items()}
        out["attention_mask"] = causal_mask(self.tokens, self.cached)
        return out

    def float_model(self) -> onnx.ModelProto:
        return deployed_model(self)

    def finish(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """After quantization: the KV ports as 8-bit tensors (module docstring)."""
        if self.precision == "float":
            return model
        names_in = [n for n in self.inputs() if n.startswith(KV_PORTS)]
        names_out = [o.name for o in model.graph.output if o.name.startswith(KV_OUTPUTS)]
        return kv_to_uint8(model, names_in, names_out)


@dataclass(frozen=True)
class LmHead:
    """The final RMSNorm and the vocabulary projection over T tokens (``vocab_slice`` > 1: that fraction of the
    vocabulary, to prepare a large head in parts: each part is the same op on 1/vocab_slice of the columns)."""

    config: object
    size: int = 1
    precision: str = "w4a16"
    vocab_slice: int = 1

    mode = "lm_head"
    attention_only = False
    layers = 1

    @property
    def tokens(self) -> int:
        return self.size

    @property
    def opset(self) -> int:
        return _realsize().opset_for(self.precision)

    @property
    def columns(self) -> int:
        return -(-self.config.vocab // self.vocab_slice)

    @property
    def stem(self) -> str:
        tail = f"_v{self.vocab_slice}" if self.vocab_slice > 1 else ""
        return f"{self.config.name}_lmhead{self.size}_{self.precision}{tail}"

    @property
    def key(self) -> str:
        rs = _realsize()
        fields = {"schema": SCHEMA, "form": "lm_head", "config": asdict(self.config), "size": self.size,
                  "precision": self.precision, "slice": self.vocab_slice, "seed": rs.SEED}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    def inputs(self) -> dict[str, tuple[int, ...]]:
        return {"x": (1, self.size, self.config.hidden)}

    def feeds(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {"x": rng.standard_normal((1, self.size, self.config.hidden)).astype(np.float32)}

    def float_model(self) -> onnx.ModelProto:
        rs = _realsize()
        c = self.config
        b = rs._Builder(np.random.default_rng(rs.SEED))
        h = _rmsnorm(b, c, "x", "final_norm", self.opset)
        logits = b.op("MatMul", [h, b.weight("lm_head", (c.hidden, self.columns), 1.0 / np.sqrt(c.hidden))], "logits")
        f32 = TensorProto.FLOAT
        graph = helper.make_graph(b.nodes, _graph_name(self.stem), [helper.make_tensor_value_info("x", f32, [1, self.size, c.hidden])],
                                  [helper.make_tensor_value_info(logits, f32, [1, self.size, self.columns])], b.inits)
        return _model(graph, self.opset)

    def finish(self, model: onnx.ModelProto) -> onnx.ModelProto:
        return model


def _suffix(i: int) -> str:
    return f"_l{i}" if i else ""


def _graph_name(stem: str) -> str:
    return stem.replace(".", "_").replace("-", "_")


def _model(graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="hexfuse.realsize")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def causal_mask(tokens: int, cached: int) -> np.ndarray:
    """[T, P + T]: every new token sees the cache and the new tokens up to itself."""
    mask = np.zeros((tokens, cached + tokens), np.float32)
    mask[:, cached:] = np.triu(np.full((tokens, tokens), MASK_VALUE, np.float32), k=1)
    return mask


def _rmsnorm(b, c, x: str, prefix: str, opset: int) -> str:
    sq = b.op("Mul", [x, x], f"{prefix}_sq")
    mean = (b.op("ReduceMean", [sq, b.ints(f"{prefix}_axes", [-1])], f"{prefix}_mean", keepdims=1) if opset >= 18
            else b.op("ReduceMean", [sq], f"{prefix}_mean", axes=[-1], keepdims=1))
    var = b.op("Add", [mean, b.const(f"{prefix}_eps", np.array(c.eps, np.float32))], f"{prefix}_var")
    normed = b.op("Div", [x, b.op("Sqrt", [var], f"{prefix}_rms")], f"{prefix}_normed")
    gamma = b.const(f"{prefix}_gamma", (1.0 + 0.02 * b.rng.standard_normal(c.hidden)).astype(np.float32))
    return b.op("Mul", [normed, gamma], f"{prefix}_out")


def deployed_model(layer: DeployedLayer) -> onnx.ModelProto:
    rs = _realsize()
    c, T, P = layer.config, layer.tokens, layer.cached
    b = rs._Builder(np.random.default_rng(rs.SEED))
    positions = np.arange(P, P + T)
    cos, sin = rs._rope_tables(positions, c.head_dim, c.rope_theta)
    x, outs = "x", []
    for i in range(layer.layers):
        if layer.grouped:
            x, k, v = _layer_grouped(b, layer, x, _suffix(i), cos, sin)
            outs += [(k, (c.kv_heads, c.head_dim, 1)), (v, (c.kv_heads, 1, c.head_dim))]
        else:
            x, ks, vs = _layer(b, layer, x, _suffix(i), cos, sin)
            outs += [(k, (1, c.head_dim, T)) for k in ks] + [(v, (1, T, c.head_dim)) for v in vs]
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(n, f32, list(s)) for n, s in layer.inputs().items()]
    outputs = [helper.make_tensor_value_info(x, f32, [1, T, c.hidden])] + [
        helper.make_tensor_value_info(name, f32, list(shape)) for name, shape in outs]
    used = {name for node in b.nodes for name in node.input}
    inits = [t for t in b.inits if t.name in used]  # (a prompt pass reads K's weights transposed only)
    return _model(helper.make_graph(b.nodes, _graph_name(layer.stem), inputs, outputs, inits), layer.opset)


def _layer(b, layer: DeployedLayer, x: str, sfx: str, cos: np.ndarray, sin: np.ndarray) -> tuple[list[str], list[str]]:
    """One layer, attention split per head (module docstring): (its output, the new K per KV head, the new V)."""
    c, T, P = layer.config, layer.tokens, layer.cached
    n, d = c.kv_heads, c.head_dim
    r = c.heads // n
    std = 1.0 / np.sqrt(c.hidden)
    half = d // 2
    cos_t, sin_t = b.const(f"rope_cos{sfx}", cos[None]), b.const(f"rope_sin{sfx}", sin[None])  # [1, T, d]

    def columns(name: str, width: int, parts: int) -> list[str]:  # one [hidden, width*parts] draw, cut per head
        w = (b.rng.standard_normal((c.hidden, width * parts)) * std).astype(np.float32)
        return [b.const(f"{name}{sfx}_h{i}", np.ascontiguousarray(w[:, i * width:(i + 1) * width])) for i in range(parts)]

    def rope(v: str, prefix: str, axis: int = -1, out: str = "") -> str:  # rotate-half over ``axis`` of [1, T, d] (-2: [1, d, T])
        c_t, s_t = (cos_t, sin_t) if axis == -1 else (cos_kt, sin_kt)
        x1 = b.op("Slice", [v, b.ints(f"{prefix}_s0", [0]), b.ints(f"{prefix}_e0", [half]), b.ints(f"{prefix}_a0", [axis])], f"{prefix}_x1")
        x2 = b.op("Slice", [v, b.ints(f"{prefix}_s1", [half]), b.ints(f"{prefix}_e1", [d]), b.ints(f"{prefix}_a1", [axis])], f"{prefix}_x2")
        rot = b.op("Concat", [b.op("Neg", [x2], f"{prefix}_neg"), x1], f"{prefix}_rot", axis=axis)
        return b.op("Add", [b.op("Mul", [v, c_t], f"{prefix}_mcos"), b.op("Mul", [rot, s_t], f"{prefix}_msin")],
                    out or f"{prefix}_out")

    h = _rmsnorm(b, c, x, f"attn_norm{sfx}", layer.opset)
    wq, wk, wv = columns("wq", d, c.heads), columns("wk", d, n), columns("wv", d, n)
    scale = b.const(f"inv_sqrt_d{sfx}", np.array(1 / np.sqrt(d), np.float32))
    if T > 1:  # K comes out transposed from the projection of h^T (one Transpose of h per layer, none per head:
        # a Transpose on the way to a graph output is pushed past its Q/DQ to the output by ORT, onto the CPU)
        h_t = b.op("Transpose", [h], f"attn_norm_t{sfx}", perm=[0, 2, 1])  # [1, hidden, T]
        cos_kt, sin_kt = b.const(f"rope_cos_t{sfx}", cos.T[None]), b.const(f"rope_sin_t{sfx}", sin.T[None])
        wk_t = [b.const(f"{w}_t", np.ascontiguousarray(numpy_helper.to_array(next(i for i in b.inits if i.name == w)).T))
                for w in wk]
    new_k, new_v, heads = [], [], []
    for j in range(n):
        tag = f"{sfx}_h{j}"
        if T > 1:
            new_k.append(rope(b.op("MatMul", [wk_t[j], h_t], f"k_proj{tag}"), f"k_rope{tag}", -2, f"new_k{tag}"))  # [1, d, T]
        else:  # [1, 1, d] is [1, d, 1] as it lies: stored transposed without a move
            k = rope(b.op("MatMul", [h, wk[j]], f"k_proj{tag}"), f"k_rope{tag}")
            new_k.append(b.op("Reshape", [k, b.ints(f"new_k_shape{tag}", [1, d, 1])], f"new_k{tag}"))
        new_v.append(b.op("MatMul", [h, wv[j]], f"new_v{tag}"))  # [1, T, d]
        kt, vv = new_k[-1], new_v[-1]
        if P:
            kt = b.op("Concat", [f"past_k{tag}", kt], f"keys_t{tag}", axis=2)  # [1, d, S]
            vv = b.op("Concat", [f"past_v{tag}", vv], f"values{tag}", axis=1)  # [1, S, d]
        for i in range(j * r, (j + 1) * r):  # the group's query heads read its K/V where they lie
            q = rope(b.op("MatMul", [h, wq[i]], f"q_proj{sfx}_q{i}"), f"q_rope{sfx}_q{i}")
            scores = b.op("Mul", [b.op("MatMul", [q, kt], f"qk{sfx}_q{i}"), scale], f"scores{sfx}_q{i}")  # [1, T, S]
            probs = b.op("Softmax", [b.op("Add", [scores, "attention_mask"], f"masked{sfx}_q{i}")], f"probs{sfx}_q{i}", axis=-1)
            heads.append(b.op("MatMul", [probs, vv], f"pv{sfx}_q{i}"))  # [1, T, d]
    merged = b.op("Concat", heads, f"attn_merged{sfx}", axis=-1)
    return _mlp_part(b, layer, x, merged, sfx, std), new_k, new_v


def _layer_grouped(b, layer: DeployedLayer, x: str, sfx: str, cos: np.ndarray, sin: np.ndarray) -> tuple[str, str, str]:
    """One new token, attention batched over the KV heads (the batch) with a group's query heads as its rows:

        q [n, r, d] x K^T [n, d, S] -> [n, r, S] (+ mask, Softmax) x V [n, S, d] -> [n, r, d]

    At T = 1 every reshape here is a view: nothing is transposed, expanded or copied but the cache concat."""
    c, P = layer.config, layer.cached
    n, d = c.kv_heads, c.head_dim
    r = c.heads // n
    std = 1.0 / np.sqrt(c.hidden)
    half = d // 2
    cos_t, sin_t = b.const(f"rope_cos{sfx}", cos[None]), b.const(f"rope_sin{sfx}", sin[None])  # [1, 1, d]

    def shape(name: str, value: str, dims) -> str:
        return b.op("Reshape", [value, b.ints(f"{name}_shape", list(dims))], name)

    def rope(v: str, prefix: str) -> str:
        x1 = b.op("Slice", [v, b.ints(f"{prefix}_s0", [0]), b.ints(f"{prefix}_e0", [half]), b.ints(f"{prefix}_a0", [-1])], f"{prefix}_x1")
        x2 = b.op("Slice", [v, b.ints(f"{prefix}_s1", [half]), b.ints(f"{prefix}_e1", [d]), b.ints(f"{prefix}_a1", [-1])], f"{prefix}_x2")
        rot = b.op("Concat", [b.op("Neg", [x2], f"{prefix}_neg"), x1], f"{prefix}_rot", axis=-1)
        return b.op("Add", [b.op("Mul", [v, cos_t], f"{prefix}_mcos"), b.op("Mul", [rot, sin_t], f"{prefix}_msin")], f"{prefix}_out")

    h = _rmsnorm(b, c, x, f"attn_norm{sfx}", layer.opset)
    q = rope(shape(f"q_rows{sfx}", b.op("MatMul", [h, b.weight(f"wq{sfx}", (c.hidden, c.heads * d), std)], f"q_proj{sfx}"),
                   (n, r, d)), f"q_rope{sfx}")
    k = rope(shape(f"k_heads{sfx}", b.op("MatMul", [h, b.weight(f"wk{sfx}", (c.hidden, n * d), std)], f"k_proj{sfx}"),
                   (n, 1, d)), f"k_rope{sfx}")
    new_k = shape(f"new_k{sfx}", k, (n, d, 1))  # [n, 1, d] is [n, d, 1] as it lies
    new_v = shape(f"new_v{sfx}", b.op("MatMul", [h, b.weight(f"wv{sfx}", (c.hidden, n * d), std)], f"v_proj{sfx}"), (n, 1, d))
    kt, vv = new_k, new_v
    if P:
        kt = b.op("Concat", [f"past_k{sfx}", new_k], f"keys_t{sfx}", axis=2)
        vv = b.op("Concat", [f"past_v{sfx}", new_v], f"values{sfx}", axis=1)
    scale = b.const(f"inv_sqrt_d{sfx}", np.array(1 / np.sqrt(d), np.float32))
    scores = b.op("Mul", [b.op("MatMul", [q, kt], f"qk{sfx}"), scale], f"scores{sfx}")  # [n, r, S]
    probs = b.op("Softmax", [b.op("Add", [scores, "attention_mask"], f"masked{sfx}")], f"probs{sfx}", axis=-1)
    merged = shape(f"attn_merged{sfx}", b.op("MatMul", [probs, vv], f"pv{sfx}"), (1, 1, c.heads * d))
    return _mlp_part(b, layer, x, merged, sfx, std), new_k, new_v


def _mlp_part(b, layer: DeployedLayer, x: str, merged: str, sfx: str, std: float) -> str:
    """o projection, residual, and (unless attention only) the SwiGLU MLP with its residual."""
    c = layer.config
    o = b.op("MatMul", [merged, b.weight(f"wo{sfx}", (c.heads * c.head_dim, c.hidden), std)], f"o_proj{sfx}")
    r1 = b.op("Add", [x, o], f"resid1{sfx}")
    if layer.attention_only:
        return r1
    h2 = _rmsnorm(b, c, r1, f"mlp_norm{sfx}", layer.opset)
    gate = b.op("MatMul", [h2, b.weight(f"wg{sfx}", (c.hidden, c.mlp), std)], f"gate_proj{sfx}")
    up = b.op("MatMul", [h2, b.weight(f"wu{sfx}", (c.hidden, c.mlp), std)], f"up_proj{sfx}")
    act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate], f"gate_sig{sfx}")], f"silu{sfx}"), up], f"swiglu{sfx}")
    down = b.op("MatMul", [act, b.weight(f"wd{sfx}", (c.mlp, c.hidden), 1.0 / np.sqrt(c.mlp))], f"down_proj{sfx}")
    return b.op("Add", [r1, down], f"y{sfx}")


# --- 8-bit KV ports -------------------------------------------------------------------------------
def _uint8_encoding(scale: np.ndarray, zero: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same real range in 8 bits (a uint16 encoding's range over 255 steps instead of 65535)."""
    if zero.dtype == np.uint8:
        return scale, zero
    steps = float(np.iinfo(zero.dtype).max)
    lo = -zero.astype(np.float64) * scale
    hi = (steps - zero.astype(np.float64)) * scale
    s8 = ((hi - lo) / 255.0).astype(np.float32)
    z8 = np.clip(np.round(-lo / np.maximum(s8, 1e-30)), 0, 255).astype(np.uint8)
    return s8, z8


def kv_to_uint8(model: onnx.ModelProto, inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    """Graph inputs ``inputs`` become uint8 tensors read by their DequantizeLinear (the QuantizeLinear the
    quantizer put after them goes); graph outputs ``outputs`` become a uint8 QuantizeLinear of what their
    DequantizeLinear gave. Encodings keep their real range in 8 bits."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    nodes = list(g.node)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    producer: dict[str, onnx.NodeProto] = {}
    for node in nodes:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
        for name in node.output:
            producer[name] = node
    drop: set[int] = set()
    made = 0

    def to_uint8(nodes_using: list[onnx.NodeProto], scale_name: str, zero_name: str, tag: str) -> None:
        nonlocal made
        s8, z8 = _uint8_encoding(numpy_helper.to_array(inits[scale_name]), numpy_helper.to_array(inits[zero_name]))
        s_name, z_name = f"{tag}_scale_u8", f"{tag}_zero_u8"
        g.initializer.extend([numpy_helper.from_array(np.asarray(s8, np.float32), s_name),
                              numpy_helper.from_array(np.asarray(z8, np.uint8), z_name)])
        for node in nodes_using:
            node.input[1], node.input[2] = s_name, z_name
        made += 1

    for name in inputs:
        quants = [n for n in consumers.get(name, []) if n.op_type == "QuantizeLinear"]
        if len(quants) != 1 or len(consumers[name]) != 1:
            raise HexfuseError(f"realsize: input {name} is not read by exactly one QuantizeLinear")
        q = quants[0]
        deqs = consumers.get(q.output[0], [])
        if not deqs or any(n.op_type != "DequantizeLinear" for n in deqs):
            raise HexfuseError(f"realsize: the QuantizeLinear of {name} is read by other than DequantizeLinear")
        to_uint8(deqs, q.input[1], q.input[2], name)
        for node in deqs:
            node.input[0] = name
        drop.add(id(q))
        vi = next(i for i in g.input if i.name == name)
        vi.type.tensor_type.elem_type = TensorProto.UINT8
        # the cache stays 8-bit through its Concat with the new token (a byte copy, not a 16-bit widening of the
        # whole cache: Phi-3.5's 32 KV heads at 4095 tokens are 25 MB of 8-bit cache per layer, 50 MB widened, and
        # QNN spilled 223 MB per layer through DDR for them); QK^T and PV read it as 8-bit operands
        for dq in deqs:
            for cat in consumers.get(dq.output[0], []):
                if cat.op_type != "Concat":
                    continue
                for q_out in consumers.get(cat.output[0], []):
                    if q_out.op_type == "QuantizeLinear":
                        readers = [n for n in consumers.get(q_out.output[0], []) if n.op_type == "DequantizeLinear"]
                        for node in (q_out, *readers):
                            node.input[1], node.input[2] = dq.input[1], dq.input[2]
    for name in outputs:  # ... -> DQ -> name  becomes  ... -> DQ -> Q(uint8) -> name: a requantize (QNN's Convert);
        # re-typing the Q that the quantizer put after the producer changes that op's own output encoding (a
        # Transpose with 16-bit in and 8-bit out), which the QNN EP leaves to the CPU
        dq = producer.get(name)
        if dq is None or dq.op_type != "DequantizeLinear":
            raise HexfuseError(f"realsize: output {name} is not given by a DequantizeLinear")
        dq.output[0] = f"{name}_dq"
        for node in consumers.get(name, []):
            node.input[:] = [dq.output[0] if i == name else i for i in node.input]
        q8 = helper.make_node("QuantizeLinear", [dq.output[0], "", ""], [name], name=f"{name}_to_uint8")
        nodes.append(q8)
        to_uint8([q8], dq.input[1], dq.input[2], name)
        vo = next(o for o in g.output if o.name == name)
        vo.type.tensor_type.elem_type = TensorProto.UINT8
    kept = [n for n in nodes if id(n) not in drop]
    del g.node[:]
    g.node.extend(kept)
    used = {name for n in kept for name in n.input}
    unused = [t for t in g.initializer if t.name not in used]
    for t in unused:  # the 16-bit encodings the ports no longer read
        g.initializer.remove(t)
    del g.value_info[:]  # stale types of renamed tensors; the loader infers them again
    onnx.checker.check_model(model)
    return model
