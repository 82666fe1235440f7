"""Real-dimension decoder layers (static shapes, seeded random weights) for judging speed at the sizes
QNN users run (issues 23, 24 and 43). Two forms: **deployed** (the default; tools/realsize_deployed.py: grouped
attention without expands, K cache stored transposed, 8-bit KV in, only the new K/V out, as Qualcomm's exported
LLMs run), and **legacy** (``:legacy``, the ``Layer`` below: the Hugging Face graph as exported, drawn here).
``write_layer`` writes one layer of either form; ``Config.from_hf`` reads a Llama-family ``config.json``. Built with ``onnx.helper`` and numpy only; written at benchmark time
into a cache (``~/.cache/hexfuse/realsize``, ``$HEXFUSE_REALSIZE_CACHE``), never committed.

One Llama-style layer, batch 1, T query tokens, S = T (prefill) or L + 1 (decode) key tokens:

    x ─┬─ RMSNorm ─┬─ Wq ─ heads ─ RoPE ────────────────────────────────┐
       │           ├─ Wk ─ heads ─ RoPE ─ [Concat past_k] ─ repeat KV ─ QK^T/sqrt(d) [+ mask] ─ Softmax ─┐
       │           └─ Wv ─ heads ─────── [Concat past_v] ─ repeat KV ───────────────────────────── PV ─┘
       │                                                                     merge heads ─ Wo ─┐
       └──────────────────────────────────────────────────────────────────────────────────── Add ─ r
    r ─┬─ RMSNorm ─┬─ Wg ─ Sigmoid(g)*g ─┐
       │           └─ Wu ──────────── Mul ─ Wd ─┐
       └─────────────────────────────────────── Add ─ y          (outputs: y, present_k, present_v)

Options: ``head_groups`` G splits attention into G independent chains after RoPE / the KV concat (Split of
the q heads and of the KV heads they share; QK^T, scale, mask, softmax, PV per group; Concat before the o
projection): the same numbers, and head group g's softmax no longer depends on group g+1's QK^T.
``attention_only`` drops the MLP (y = x + attention); ``layers`` chains N layers (decode: a cache each).

RoPE is the usual rotate-half (Slice, Neg, Concat, Mul, Add) with cos/sin as constants of the positions;
the KV heads are repeated to the query heads by Unsqueeze/Expand/Reshape (grouped-query attention).
Quantized to QDQ with ONNX Runtime's QNN helpers as ``models/build_models.py`` does: w8a8 (uint8
activations and weights), w8a16 (uint16 activations, uint8 weights) or w4a16 (int4 weights), random
calibration feeds.

    python -m hexfuse.tools.realsize llama-3.2-1b:decode:4096:w4a16       # deployed form, prints the cached path
    python -m hexfuse.tools.realsize llama-3.2-1b:prefill:128:w4a16:p3968 # a prompt pass over a 3968-token cache
    python -m hexfuse.tools.realsize config.json:decode:4096:w4a16       # any Llama-family config.json
    python -m hexfuse.tools.realsize llama-3.2-1b:prefill:128:w8a8:legacy # the old form
    python -m hexfuse.tools.realsize llama-3.2-1b:prefill:128+llama-3.2-1b:decode:512   # two requests
    python -m hexfuse.tools.realsize llama-3.2-1b:prefill:1024:attn:g4   # attention only, 4 head-group chains
    python -m hexfuse.tools.realsize llama-3.2-1b:decode:2048:x2         # two layers in a row
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hexfuse.graph_passes.errors import HexfuseError

SCHEMA = 1  # bump when the graph built for a key changes (the cache key includes it)
OPSET = 17
OPSET_16BIT = 21  # 16-bit Q/DQ in the ai.onnx domain (below 21 ORT's quantizer writes com.microsoft Q/DQ,
                  # which the pass does not know and treats as barriers)
SEED = 20260
CALIB_SAMPLES = 3
MASK_VALUE = -100.0  # not -inf: a QDQ range that holds it still resolves the unmasked scores
ROPE_THETA = 10000.0


def opset_for(precision: str) -> int:
    """The opset a layer of ``precision`` is written in: 16-bit Q/DQ (and int4) need opset 21."""
    return OPSET_16BIT if precision in ("w8a16", "w4a16") else OPSET


@dataclass(frozen=True)
class Config:
    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    eps: float = 1e-5
    layers: int = 1  # num_hidden_layers (the whole model; a built Layer holds one, or ``Layer.layers``)
    vocab: int = 0  # vocab_size (the LM head's columns; 0: unknown)
    rope_theta: float = ROPE_THETA
    tied: bool = False  # tie_word_embeddings: the LM head reads the embedding table

    @classmethod
    def from_hf(cls, source: str | Path | dict, name: str | None = None) -> Config:
        """A Llama-family Hugging Face ``config.json`` (path or dict): hidden_size, num_attention_heads,
        num_key_value_heads, intermediate_size, num_hidden_layers, head_dim, rope_theta, vocab_size."""
        raw = source if isinstance(source, dict) else json.loads(Path(source).read_text(encoding="utf-8"))
        label = name or raw.get("hexfuse_name") or (Path(source).stem if not isinstance(source, dict) else "model")
        try:
            hidden, heads = int(raw["hidden_size"]), int(raw["num_attention_heads"])
            return cls(str(label), hidden, heads, int(raw.get("num_key_value_heads") or heads),
                       int(raw.get("head_dim") or hidden // heads), int(raw["intermediate_size"]),
                       float(raw.get("rms_norm_eps", 1e-5)), int(raw.get("num_hidden_layers", 1)),
                       int(raw.get("vocab_size", 0)), float(raw.get("rope_theta", ROPE_THETA)),
                       bool(raw.get("tie_word_embeddings", False)))
        except (KeyError, TypeError, ValueError) as exc:
            raise HexfuseError(f"realsize: {label}: not a Llama-family config.json ({exc})") from None


# Published configs (the models' config.json on their hub pages; tools/anchors/llm_configs holds them as files).
CONFIGS = {c.name: c for c in (
    Config("llama-3.2-1b", 2048, 32, 8, 64, 8192, 1e-5, 16, 128256, 500000.0, True),
    Config("llama-3.2-3b", 3072, 24, 8, 128, 8192, 1e-5, 28, 128256, 500000.0, True),
    Config("qwen2.5-1.5b", 1536, 12, 2, 128, 8960, 1e-6, 28, 151936, 1000000.0, True),
    Config("phi-3.5-mini", 3072, 32, 32, 96, 8192, 1e-5, 32, 32064, 10000.0),
    Config("llama-3-8b", 4096, 32, 8, 128, 14336, 1e-5, 32, 128256, 500000.0),
    Config("tiny", 256, 4, 2, 64, 512, 1e-5, 2, 512),  # real per-head dims, small everything else (CI)
)}
MODES = ("prefill", "decode")
PRECISIONS = ("float", "w8a8", "w8a16", "w4a16")


@dataclass(frozen=True)
class Layer:
    """One layer to build: ``size`` is T for prefill, the KV cache length L for decode."""

    config: Config
    mode: str
    size: int
    precision: str = "w8a8"
    head_groups: int = 1  # G > 1: attention as G independent head-group chains (issue 24)
    attention_only: bool = False  # no MLP (keeps long prefill preparable on the simulator)
    layers: int = 1  # layers in a row (decode: a KV cache per layer)

    def __post_init__(self) -> None:
        c = self.config
        if self.head_groups < 1 or c.kv_heads % self.head_groups:
            raise HexfuseError(f"realsize: head groups must divide the {c.kv_heads} KV heads of {c.name}, "
                               f"got {self.head_groups}")
        if self.layers < 1:
            raise HexfuseError(f"realsize: layers must be positive, got {self.layers}")
        if self.mode not in MODES:
            raise HexfuseError(f"realsize: mode must be one of {MODES}, got {self.mode!r}")
        if self.precision not in PRECISIONS:
            raise HexfuseError(f"realsize: precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.size < 1:
            raise HexfuseError(f"realsize: size must be positive, got {self.size}")

    @property
    def options(self) -> dict[str, object]:
        """The options away from their defaults (default layers keep the stems and keys already cached)."""
        found = {"head_groups": self.head_groups, "attention_only": self.attention_only, "layers": self.layers}
        return {k: v for k, v in found.items() if v != {"head_groups": 1, "attention_only": False, "layers": 1}[k]}

    @property
    def stem(self) -> str:
        o = self.options
        tail = ("_attn" if o.get("attention_only") else "") + (f"_g{self.head_groups}" if "head_groups" in o else "") \
            + (f"_x{self.layers}" if "layers" in o else "")
        return f"{self.config.name}_{self.mode}{self.size}_{self.precision}{tail}"

    @property
    def key(self) -> str:
        fields = {"schema": SCHEMA, "config": asdict(self.config), "mode": self.mode, "size": self.size,
                  "precision": self.precision, "seed": SEED, "calib": CALIB_SAMPLES}
        if self.opset != OPSET:  # (keys of opset-17 layers stay those of the models already cached)
            fields["opset"] = self.opset
        fields.update(self.options)
        blob = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def opset(self) -> int:
        return opset_for(self.precision)

    @property
    def tokens(self) -> int:
        return self.size if self.mode == "prefill" else 1

    def float_model(self) -> onnx.ModelProto:
        return float_model(self)

    def inputs(self) -> dict[str, tuple[int, ...]]:
        c = self.config
        shapes = {"x": (1, self.tokens, c.hidden)}
        if self.mode == "decode":
            for i in range(self.layers):
                shapes[f"past_k{_suffix(i)}"] = shapes[f"past_v{_suffix(i)}"] = (1, c.kv_heads, self.size, c.head_dim)
        return shapes


def _suffix(layer_index: int) -> str:
    """Names of layer 0 carry no suffix (as the one-layer models already cached); later layers '_l<i>'."""
    return f"_l{layer_index}" if layer_index else ""


@dataclass(frozen=True)
class Requests:
    """Two layers as two independent requests in one graph (``hexfuse merge``; equal weights stored once)."""

    first: Layer
    second: Layer

    @property
    def stem(self) -> str:
        return f"{self.first.stem}+{self.second.stem}"

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.first.key}+{self.second.key}".encode()).hexdigest()[:16]

    def inputs(self) -> dict[str, tuple[int, ...]]:
        return {f"{name}/{k}": v for name, layer in zip(self.names, (self.first, self.second))
                for k, v in layer.inputs().items()}

    @property
    def names(self) -> tuple[str, str]:
        a, b = self.first.mode, self.second.mode
        return (a, b) if a != b else (f"{a}0", f"{b}1")


def cache_dir() -> Path:
    root = os.environ.get("HEXFUSE_REALSIZE_CACHE")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hexfuse" / "realsize"


def example_inputs(layer: Layer, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in layer.inputs().items()}


# --- the float graph ------------------------------------------------------------------------------
class _Builder:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng, self.nodes, self.inits, self.n = rng, [], [], 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def ints(self, name: str, values) -> str:
        return self.const(name, np.asarray(values, dtype=np.int64))

    def op(self, op_type: str, inputs: list[str], name: str, outputs: int = 1, **attrs) -> str | list[str]:
        self.n += 1
        outs = [f"{name}" if outputs == 1 else f"{name}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=f"{name}_node", **attrs))
        return outs[0] if outputs == 1 else outs


def _rope_tables(positions: np.ndarray, head_dim: int, theta: float = ROPE_THETA) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(positions, inv)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def float_model(layer: Layer) -> onnx.ModelProto:
    c, T = layer.config, layer.tokens
    S = T if layer.mode == "prefill" else layer.size + 1
    b = _Builder(np.random.default_rng(SEED))
    positions = np.arange(T) if layer.mode == "prefill" else np.array([layer.size])
    cos, sin = _rope_tables(positions, c.head_dim, c.rope_theta)
    rope_tables = (b.const("rope_cos", cos), b.const("rope_sin", sin))
    x, kv_out = "x", []
    for i in range(layer.layers):
        x, k, v = _decoder_layer(b, layer, x, _suffix(i), rope_tables)
        kv_out += [k, v]

    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(n, f32, list(s)) for n, s in layer.inputs().items()]
    kv = [1, c.kv_heads, S, c.head_dim]
    outputs = [helper.make_tensor_value_info(x, f32, [1, T, c.hidden])] + [
        helper.make_tensor_value_info(name, f32, kv) for name in kv_out]
    graph = helper.make_graph(b.nodes, layer.stem.replace(".", "_").replace("-", "_"), inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", layer.opset)], producer_name="hexfuse.realsize")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _decoder_layer(b: _Builder, layer: Layer, x: str, sfx: str, rope_tables: tuple[str, str]) -> tuple[str, str, str]:
    """One layer on ``x``: (its output, present_k, present_v); every name carries ``sfx``."""
    c, T, rng = layer.config, layer.tokens, b.rng
    std = 1.0 / np.sqrt(c.hidden)

    def rmsnorm(x: str, prefix: str) -> str:
        sq = b.op("Mul", [x, x], f"{prefix}_sq")
        mean = (b.op("ReduceMean", [sq, b.ints(f"{prefix}_axes", [-1])], f"{prefix}_mean", keepdims=1) if layer.opset >= 18
                else b.op("ReduceMean", [sq], f"{prefix}_mean", axes=[-1], keepdims=1))
        var = b.op("Add", [mean, b.const(f"{prefix}_eps", np.array(c.eps, np.float32))], f"{prefix}_var")
        rms = b.op("Sqrt", [var], f"{prefix}_rms")
        normed = b.op("Div", [x, rms], f"{prefix}_normed")
        gamma = b.const(f"{prefix}_gamma", (1.0 + 0.02 * rng.standard_normal(c.hidden)).astype(np.float32))
        return b.op("Mul", [normed, gamma], f"{prefix}_out")

    def heads(x: str, n: int, prefix: str) -> str:  # [1, T, n*d] -> [1, n, T, d]
        r = b.op("Reshape", [x, b.ints(f"{prefix}_shape", [1, T, n, c.head_dim])], f"{prefix}_split")
        return b.op("Transpose", [r], f"{prefix}_heads", perm=[0, 2, 1, 3])

    cos_name, sin_name = rope_tables
    half = c.head_dim // 2

    def rope(x: str, prefix: str) -> str:
        x1 = b.op("Slice", [x, b.ints(f"{prefix}_s0", [0]), b.ints(f"{prefix}_e0", [half]), b.ints(f"{prefix}_ax0", [-1])], f"{prefix}_x1")
        x2 = b.op("Slice", [x, b.ints(f"{prefix}_s1", [half]), b.ints(f"{prefix}_e1", [c.head_dim]), b.ints(f"{prefix}_ax1", [-1])], f"{prefix}_x2")
        rot = b.op("Concat", [b.op("Neg", [x2], f"{prefix}_neg"), x1], f"{prefix}_rot", axis=-1)
        return b.op("Add", [b.op("Mul", [x, cos_name], f"{prefix}_cos"), b.op("Mul", [rot, sin_name], f"{prefix}_sin")], f"{prefix}_out")

    h = rmsnorm(x, f"attn_norm{sfx}")
    q = rope(heads(b.op("MatMul", [h, b.weight(f"wq{sfx}", (c.hidden, c.heads * c.head_dim), std)], f"q_proj{sfx}"), c.heads, f"q{sfx}"), f"q_rope{sfx}")
    k = rope(heads(b.op("MatMul", [h, b.weight(f"wk{sfx}", (c.hidden, c.kv_heads * c.head_dim), std)], f"k_proj{sfx}"), c.kv_heads, f"k{sfx}"), f"k_rope{sfx}")
    v = heads(b.op("MatMul", [h, b.weight(f"wv{sfx}", (c.hidden, c.kv_heads * c.head_dim), std)], f"v_proj{sfx}"), c.kv_heads, f"v{sfx}")
    if layer.mode == "decode":
        k = b.op("Concat", [f"past_k{sfx}", k], f"present_k{sfx}", axis=2)
        v = b.op("Concat", [f"past_v{sfx}", v], f"present_v{sfx}", axis=2)
    else:
        k = b.op("Identity", [k], f"present_k{sfx}")
        v = b.op("Identity", [v], f"present_v{sfx}")
    made: dict[str, str] = {}

    def const(name: str, value) -> str:  # one constant for every head group (a 4k causal mask is 64 MB)
        if name not in made:
            made[name] = b.const(f"{name}{sfx}", value())
        return made[name]

    G = layer.head_groups
    if G == 1:
        attn = _attention(b, layer, q, k, v, sfx, const)
    else:  # G chains, each with its q heads and the KV heads they share; nothing crosses between them
        qs = b.op("Split", [q, b.ints(f"q_groups{sfx}", [c.heads // G] * G)], f"q_group{sfx}", outputs=G, axis=1)
        ks = b.op("Split", [k, b.ints(f"k_groups{sfx}", [c.kv_heads // G] * G)], f"k_group{sfx}", outputs=G, axis=1)
        vs = b.op("Split", [v, b.ints(f"v_groups{sfx}", [c.kv_heads // G] * G)], f"v_group{sfx}", outputs=G, axis=1)
        parts = [_attention(b, layer, qs[g], ks[g], vs[g], f"_g{g}{sfx}", const, G) for g in range(G)]
        attn = b.op("Concat", parts, f"attn_heads{sfx}", axis=1)
    merged = b.op("Reshape", [b.op("Transpose", [attn], f"attn_t{sfx}", perm=[0, 2, 1, 3]), b.ints(f"merge_shape{sfx}", [1, T, c.heads * c.head_dim])], f"attn_merged{sfx}")
    o = b.op("MatMul", [merged, b.weight(f"wo{sfx}", (c.heads * c.head_dim, c.hidden), std)], f"o_proj{sfx}")
    r1 = b.op("Add", [x, o], f"resid1{sfx}")
    if layer.attention_only:
        return r1, k, v
    h2 = rmsnorm(r1, f"mlp_norm{sfx}")
    gate = b.op("MatMul", [h2, b.weight(f"wg{sfx}", (c.hidden, c.mlp), std)], f"gate_proj{sfx}")
    up = b.op("MatMul", [h2, b.weight(f"wu{sfx}", (c.hidden, c.mlp), std)], f"up_proj{sfx}")
    act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate], f"gate_sig{sfx}")], f"silu{sfx}"), up], f"swiglu{sfx}")
    down = b.op("MatMul", [act, b.weight(f"wd{sfx}", (c.mlp, c.hidden), 1.0 / np.sqrt(c.mlp))], f"down_proj{sfx}")
    return b.op("Add", [r1, down], f"y{sfx}"), k, v


def _attention(b: _Builder, layer: Layer, q: str, k: str, v: str, sfx: str, const, groups: int = 1) -> str:
    """Softmax(q k^T / sqrt(d) [+ causal mask]) v over ``heads/groups`` q heads and their KV heads."""
    c = layer.config
    S = layer.tokens if layer.mode == "prefill" else layer.size + 1
    heads, kv_heads = c.heads // groups, c.kv_heads // groups

    def repeat_kv(x: str, prefix: str) -> str:  # [1, kv, S, d] -> [1, heads, S, d]
        rep = heads // kv_heads
        if rep == 1:
            return x
        u = b.op("Unsqueeze", [x, b.ints(f"{prefix}_axis", [2])], f"{prefix}_unsq")
        e = b.op("Expand", [u, b.ints(f"{prefix}_to", [1, kv_heads, rep, S, c.head_dim])], f"{prefix}_expand")
        return b.op("Reshape", [e, b.ints(f"{prefix}_shape", [1, heads, S, c.head_dim])], f"{prefix}_rep")

    kt = b.op("Transpose", [repeat_kv(k, f"k_rep{sfx}")], f"k_t{sfx}", perm=[0, 1, 3, 2])
    scale = const("inv_sqrt_d", lambda: np.array(1 / np.sqrt(c.head_dim), np.float32))
    scores = b.op("Mul", [b.op("MatMul", [q, kt], f"qk{sfx}"), scale], f"scores{sfx}")
    if layer.mode == "prefill":
        T = layer.tokens
        mask = const("causal_mask", lambda: np.triu(np.full((T, T), MASK_VALUE, np.float32), k=1)[None, None])
        scores = b.op("Add", [scores, mask], f"masked{sfx}")
    probs = b.op("Softmax", [scores], f"probs{sfx}", axis=-1)
    return b.op("MatMul", [probs, repeat_kv(v, f"v_rep{sfx}")], f"pv{sfx}")


# --- quantization (as models/build_models.py quantize_qdq) ----------------------------------------
def quantize_qdq(model: onnx.ModelProto, layer: Layer, workdir: Path) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config, qnn_preprocess_model

    class RandomReader(CalibrationDataReader):
        def __init__(self) -> None:
            make = getattr(layer, "feeds", None) or (lambda seed: example_inputs(layer, seed))
            self.feeds = [make(SEED + 100 + i) for i in range(CALIB_SAMPLES)]
            self.i = 0

        def get_next(self):
            if self.i >= len(self.feeds):
                return None
            self.i += 1
            return self.feeds[self.i - 1]

        def rewind(self) -> None:
            self.i = 0

    activations = QuantType.QUInt16 if layer.precision in ("w8a16", "w4a16") else QuantType.QUInt8
    weights = QuantType.QInt4 if layer.precision == "w4a16" else QuantType.QUInt8  # the QNN EP takes int4 weights
    fpath, pre, qpath = (str(workdir / n) for n in ("float.onnx", "pre.onnx", "qdq.onnx"))
    onnx.save(model, fpath)
    src = pre if qnn_preprocess_model(fpath, pre) else fpath
    cfg = get_qnn_qdq_config(src, RandomReader(), activation_type=activations, weight_type=weights)
    quantize(src, qpath, cfg)
    q = onnx.load(qpath)
    del q.metadata_props[:]
    q.doc_string = ""
    return q


def build(layer, cache: Path | None = None) -> Path:
    """The cached model file of ``layer`` (a Layer, Requests, or anything with ``stem``, ``key``,
    ``inputs()``, ``precision`` and ``float_model()``: built and written atomically when missing)."""
    folder = cache or cache_dir()
    path = folder / f"{layer.stem}.{layer.key}.onnx"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(layer, Requests):
        from hexfuse.graph_passes.merge.requests import merge_models

        merged = merge_models(build(layer.first, cache), build(layer.second, cache), layer.names).model
        with tempfile.TemporaryDirectory(dir=folder) as td:
            tmp = Path(td) / "out.onnx"
            onnx.save(merged, str(tmp))
            os.replace(tmp, path)
        return path
    model = layer.float_model()
    with tempfile.TemporaryDirectory(dir=folder) as td:
        if layer.precision != "float":
            model = quantize_qdq(model, layer, Path(td))
        if hasattr(layer, "finish"):  # the deployed form's 8-bit KV ports
            model = layer.finish(model)
        tmp = Path(td) / "out.onnx"
        onnx.save(model, str(tmp))
        os.replace(tmp, path)
    return path


def config_of(name: str) -> Config:
    """A bundled config by name, or a Hugging Face ``config.json`` by path."""
    if name in CONFIGS:
        return CONFIGS[name]
    if name.endswith(".json") and Path(name).is_file():
        return Config.from_hf(name)
    raise HexfuseError(f"realsize: unknown config {name!r} (one of {sorted(CONFIGS)}, or a config.json path)")


def parse_layer(text: str):
    """'llama-3.2-1b:prefill:128[:w8a16]' -> the deployed form (realsize_deployed.DeployedLayer); with ':legacy'
    the old form (Layer); 'A+B' -> the two as two requests in one graph. CONFIG may be a config.json path."""
    from hexfuse.tools.realsize_deployed import DeployedLayer

    if "+" in text:
        first, second = (parse_layer(part) for part in text.split("+", 1))
        if isinstance(first, Requests) or isinstance(second, Requests):
            raise HexfuseError(f"realsize: two requests at most, got {text!r}")
        return Requests(first, second)
    parts = text.split(":")
    if len(parts) < 3 or not parts[2].isdigit():
        raise HexfuseError(f"realsize: expected CONFIG:MODE:SIZE[:PRECISION][:legacy][:pN][:attn][:gN][:xN] with CONFIG "
                           f"in {sorted(CONFIGS)} or a config.json path, got {text!r}")
    config = config_of(parts[0])
    options: dict[str, object] = {"precision": "w8a8"}
    legacy = False
    for token in parts[3:]:
        if token in PRECISIONS:
            options["precision"] = token
        elif token == "legacy":
            legacy = True
        elif token == "attn":
            options["attention_only"] = True
        elif token[:1] in ("g", "x", "p") and token[1:].isdigit():
            options[{"g": "head_groups", "x": "layers", "p": "past"}[token[0]]] = int(token[1:])
        else:
            raise HexfuseError(f"realsize: unknown option {token!r} in {text!r} (a precision {PRECISIONS}, 'legacy' "
                               f"for the old form, 'pN' for N cached tokens at prefill, 'attn' for no MLP, 'gN' for "
                               f"N head groups (legacy), 'xN' for N layers)")
    if "head_groups" in options and not legacy:
        raise HexfuseError(f"realsize: head groups split the legacy form only (add ':legacy'): {text!r}")
    if "past" in options and legacy:
        raise HexfuseError(f"realsize: the legacy form has no prefill cache ('pN'): {text!r}")
    if legacy:
        return Layer(config, parts[1], int(parts[2]), **options)
    return DeployedLayer(config, parts[1], int(parts[2]), **options)


def write_layer(config: Config, phase: str, size: int, precision: str = "w4a16", *, past: int = 0,
                legacy: bool = False, cache: Path | None = None, **options) -> Path:
    """One layer as an ONNX file (cached): ``phase`` prefill (``size`` new tokens, ``past`` cached ones) or
    decode (one new token over ``size`` cached); the deployed form, or the old one with ``legacy``.
    ``options``: attention_only, layers (and head_groups, legacy only)."""
    from hexfuse.tools.realsize_deployed import DeployedLayer

    if legacy:
        if past:
            raise HexfuseError("realsize: the legacy form has no prefill cache")
        return build(Layer(config, phase, size, precision, **options), cache)
    return build(DeployedLayer(config, phase, size, precision, past=past, **options), cache)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hexfuse.tools.realsize", description=__doc__.split("\n\n")[0])
    ap.add_argument("layers", nargs="+", help="CONFIG:MODE:SIZE[:PRECISION][:legacy][:pN][:attn][:gN][:xN], e.g. "
                    "llama-3.2-1b:prefill:128:w8a8 (deployed form; ':legacy' the old one); A+B for two requests in one graph")
    args = ap.parse_args(argv)
    try:
        for text in args.layers:
            print(build(parse_layer(text)))
    except HexfuseError as exc:
        print(f"hexfuse: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
