#!/usr/bin/env python3
"""Build the small committed ONNX test models of hexfuse (random weights, static shapes).

    python models/build_models.py --out models/

Needs torch (CPU wheel, `pip install torch==2.13.0`), transformers, onnxscript, onnx, onnxruntime.
Nothing else in hexfuse needs torch: the .onnx files and catalog.json are committed and the tests in
tests/models/ only use onnx + onnxruntime + numpy.

Every model is exported with the torch dynamo exporter (torch.onnx.export(..., dynamo=True)) at
opset 18 (the exporter's native opset, so no version conversion happens), optimized by the exporter's
onnxscript optimizer (constant folding, dead-code removal), its node/value metadata stripped, shapes
inferred in strict mode, checked with onnx.checker (full_check) and compared against torch with
onnxruntime's CPU EP.  QDQ variants are made with onnxruntime.quantization and the QNN QDQ config.
Weights are random (fixed seeds); no weights are downloaded.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx

OPSET = 18
SEED = 1234
CATALOG = "catalog.json"

# ----------------------------------------------------------------------------------------------
# random inputs (the same spec format is written to catalog.json for the tests / graph-pass tests)
# ----------------------------------------------------------------------------------------------
# spec: {"kind": "randn"} | {"kind": "randint", "low": a, "high": b} (high exclusive)
#       | {"kind": "ones"} | {"kind": "const", "value": v}

_NP_DTYPES = {"float32": np.float32, "int64": np.int64}


def make_input(spec: dict, shape: list[int], dtype: str, rng: np.random.Generator) -> np.ndarray:
    kind = spec["kind"]
    if kind == "randn":
        a = rng.standard_normal(shape)
    elif kind == "randint":
        a = rng.integers(spec["low"], spec["high"], size=shape)
    elif kind == "ones":
        a = np.ones(shape)
    elif kind == "const":
        a = np.full(shape, spec["value"])
    else:
        raise ValueError(f"unknown input kind {kind!r}")
    return a.astype(_NP_DTYPES[dtype])


# ----------------------------------------------------------------------------------------------
# model definitions
# ----------------------------------------------------------------------------------------------


@dataclass
class Built:
    module: Any  # torch.nn.Module
    inputs: dict[str, tuple[list[int], str, dict]]  # name -> (shape, dtype, value spec), in order
    output_names: list[str]


@dataclass
class Spec:
    file: str
    build: Callable[[], Built]
    architecture: str
    source: str
    independent_branches: bool
    branches: str
    requests: dict | None = None
    qdq: bool = False
    extra: dict = field(default_factory=dict)


def _torch():
    import torch

    return torch


def perturb_constant_params(module, seed: int, scale: float = 0.02) -> list[str]:
    """Add small noise to parameters whose values are all identical (LayerNorm/RMSNorm weights of
    1.0, zero biases).  Otherwise the exporter's optimizer would merge/remove them and the graphs would
    not look like a trained model's."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    changed = []
    with torch.no_grad():
        for name, p in module.named_parameters():
            flat = p.detach().flatten()
            if flat.numel() > 1 and bool(torch.all(flat == flat[0])):
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
                changed.append(name)
    return changed


SEQ = 16
VOCAB = 128
ids_spec = {"kind": "randint", "low": 0, "high": VOCAB}


def build_gptj() -> Built:
    torch = _torch()
    from transformers import GPTJConfig, GPTJForCausalLM

    torch.manual_seed(SEED)
    cfg = GPTJConfig(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=1, n_head=4, rotary_dim=8, n_inner=256,
        attn_implementation="eager", use_cache=False,
    )
    model = GPTJForCausalLM(cfg).eval()
    perturb_constant_params(model, SEED)

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            # no attention_mask: static causal mask, folded to a constant by the exporter
            return self.m(input_ids=input_ids, use_cache=False).logits

    return Built(Wrap(model).eval(), {"input_ids": ([1, SEQ], "int64", ids_spec)}, ["logits"])


def build_neox() -> Built:
    torch = _torch()
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(SEED + 1)
    cfg = GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=256,
        rotary_pct=0.25, max_position_embeddings=64, use_parallel_residual=True, attn_implementation="eager", use_cache=False,
    )
    model = GPTNeoXForCausalLM(cfg).eval()
    perturb_constant_params(model, SEED + 1)

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            # no attention_mask: static causal mask, folded to a constant by the exporter
            return self.m(input_ids=input_ids, use_cache=False).logits

    return Built(Wrap(model).eval(), {"input_ids": ([1, SEQ], "int64", ids_spec)}, ["logits"])


LLAMA_LAYERS = 2
LLAMA_KV_HEADS = 2
LLAMA_HEAD_DIM = 16
PAST = 15  # decode request: 15 cached positions + 1 new token


def build_llama() -> Built:
    torch = _torch()
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED + 2)
    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=LLAMA_LAYERS,
        num_attention_heads=4, num_key_value_heads=LLAMA_KV_HEADS, head_dim=LLAMA_HEAD_DIM,
        max_position_embeddings=64, attn_implementation="eager", use_cache=True,
    )
    model = LlamaForCausalLM(cfg).eval()
    perturb_constant_params(model, SEED + 2)
    L = LLAMA_LAYERS

    class PrefillDecode(torch.nn.Module):
        """Two independent requests in one graph, sharing only the weights:
        prefill: 16 new tokens, empty cache -> logits + the 16-position KV cache it produced;
        decode : 1 new token at position 15 over a 15-position KV cache -> logits + updated cache."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, prefill_input_ids, decode_input_ids, decode_position_ids, *past):
            # no attention masks (static causal masks, folded to constants): no padding in either request
            pre = self.m(input_ids=prefill_input_ids, use_cache=True)
            cache = DynamicCache(config=self.m.config)
            for i in range(L):
                cache.update(past[2 * i], past[2 * i + 1], i)
            dec = self.m(input_ids=decode_input_ids, position_ids=decode_position_ids, past_key_values=cache,
                         use_cache=True)
            outs = [pre.logits, dec.logits]
            for i in range(L):
                outs += [pre.past_key_values.layers[i].keys, pre.past_key_values.layers[i].values]
            for i in range(L):
                outs += [dec.past_key_values.layers[i].keys, dec.past_key_values.layers[i].values]
            return tuple(outs)

    inputs = {
        "prefill_input_ids": ([1, SEQ], "int64", ids_spec),
        "decode_input_ids": ([1, 1], "int64", ids_spec),
        "decode_position_ids": ([1, 1], "int64", {"kind": "const", "value": PAST}),
    }
    for i in range(L):
        inputs[f"decode_past_key_{i}"] = ([1, LLAMA_KV_HEADS, PAST, LLAMA_HEAD_DIM], "float32", {"kind": "randn"})
        inputs[f"decode_past_value_{i}"] = ([1, LLAMA_KV_HEADS, PAST, LLAMA_HEAD_DIM], "float32", {"kind": "randn"})
    outputs = ["prefill_logits", "decode_logits"]
    outputs += [f"prefill_present_{kv}_{i}" for i in range(L) for kv in ("key", "value")]
    outputs += [f"decode_present_{kv}_{i}" for i in range(L) for kv in ("key", "value")]
    return Built(PrefillDecode(model).eval(), inputs, outputs)


def llama_requests() -> dict:
    L = LLAMA_LAYERS
    return {
        "prefill": {
            "inputs": ["prefill_input_ids"],
            "outputs": ["prefill_logits"] + [f"prefill_present_{kv}_{i}" for i in range(L) for kv in ("key", "value")],
        },
        "decode": {
            "inputs": ["decode_input_ids", "decode_position_ids"]
            + [f"decode_past_{kv}_{i}" for i in range(L) for kv in ("key", "value")],
            "outputs": ["decode_logits"] + [f"decode_present_{kv}_{i}" for i in range(L) for kv in ("key", "value")],
        },
    }


def build_inception() -> Built:
    torch = _torch()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from tiny_archs import InceptionMini

    torch.manual_seed(SEED + 3)
    model = InceptionMini().eval()
    perturb_constant_params(model, SEED + 3)
    return Built(model, {"image": ([1, 3, 32, 32], "float32", {"kind": "randn"})}, ["logits"])


def build_moe_qwen() -> Built:
    torch = _torch()
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    torch.manual_seed(SEED + 4)
    cfg = Qwen2MoeConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=64,
        shared_expert_intermediate_size=128, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, decoder_sparse_step=1,
    )
    model = Qwen2MoeForCausalLM(cfg).eval()
    model.set_experts_implementation("batched_mm")
    assert model.config._experts_implementation == "batched_mm"
    block = model.model.layers[0].mlp  # Qwen2MoeSparseMoeBlock: router + experts + shared expert
    perturb_constant_params(block, SEED + 4)
    return Built(block.eval(), {"hidden_states": ([1, SEQ, 64], "float32", {"kind": "randn"})}, ["moe_out"])


def build_moe_dense() -> Built:
    torch = _torch()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from tiny_archs import DenseTopKMoE

    torch.manual_seed(SEED + 5)
    model = DenseTopKMoE(hidden=64, inter=128, num_experts=4, top_k=2).eval()
    return Built(model, {"hidden_states": ([1, SEQ, 64], "float32", {"kind": "randn"})}, ["moe_out"])


def build_mlp_chain() -> Built:
    torch = _torch()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from tiny_archs import MlpChain

    torch.manual_seed(SEED + 6)
    model = MlpChain(64).eval()
    perturb_constant_params(model, SEED + 6)
    return Built(model, {"x": ([1, SEQ, 64], "float32", {"kind": "randn"})}, ["y"])


SPECS: list[Spec] = [
    Spec(
        "gptj_block.onnx", build_gptj, "GPTJForCausalLM (1 layer, hidden 64, 4 heads, rotary_dim 8, vocab 128)",
        "transformers GPTJForCausalLM, random init",
        True,
        "parallel residual: attention (q/k/v MatMuls, Softmax) || MLP (fc_in, gelu_new Tanh, fc_out), both read the"
        " single ln_1 LayerNormalization output and meet in the residual Add",
        qdq=True,
    ),
    Spec(
        "neox_block.onnx", build_neox,
        "GPTNeoXForCausalLM (1 layer, hidden 64, 4 heads, rotary_pct 0.25, use_parallel_residual=True)",
        "transformers GPTNeoXForCausalLM, random init",
        True,
        "parallel residual: attention (reads input_layernorm) || MLP (reads post_attention_layernorm); both"
        " LayerNorms read the same hidden state, the branches meet in the residual Add",
    ),
    Spec(
        "llama_prefill_decode.onnx", build_llama,
        "LlamaForCausalLM (2 layers, hidden 64, 4 heads, 2 KV heads, head_dim 16, vocab 128) called twice",
        "transformers LlamaForCausalLM, random init, wrapped: one prefill request (16 tokens) and one decode"
        " request (1 token over a static 15-position KV cache) in one graph, shared weights",
        True,
        "the prefill and decode requests share only weights (initializers): no node of one depends on the"
        " other's inputs (see 'requests'); inside each request Q/K/V projections are also independent",
        requests=llama_requests(),
        qdq=True,
    ),
    Spec(
        "googlenet.onnx", build_inception,
        "InceptionMini: GoogLeNet v1 style (no BN), stem conv, 2 inception blocks, 32x32 input, 10 classes",
        "hand-written torch module models/tiny_archs.py:InceptionMini (torchvision does not import here), random init",
        True,
        "each inception block: 1x1 conv || 1x1->3x3 conv || 1x1->5x5 conv || 3x3 MaxPool->1x1 conv, all read the"
        " block input and meet in one Concat",
        qdq=True,
    ),
    Spec(
        "moe_layer.onnx", build_moe_qwen,
        "Qwen2MoeSparseMoeBlock (hidden 64, 4 experts, top-2, moe_intermediate 64, shared expert 128)",
        "transformers Qwen2MoeSparseMoeBlock with experts_implementation='batched_mm', random init",
        True,
        "shared expert (3 Gemms, SiLU) and shared_expert_gate || router (Gemm, Softmax, TopK) -> routed experts"
        " (GatherND of the selected experts' weights + batched MatMul); all read the input, meet in the final Add."
        " With batched_mm the routed experts are ONE batched MatMul per projection, not separate nodes",
        qdq=True,
    ),
    Spec(
        "moe_experts_dense.onnx", build_moe_dense,
        "DenseTopKMoE: top-2 softmax router + 4 separate SwiGLU experts (hidden 64, inter 128)",
        "hand-written torch module models/tiny_archs.py:DenseTopKMoE (dense dispatch: every expert on every"
        " token, scaled by its top-k routing weight), random init",
        True,
        "4 expert chains (gate/up MatMul, SiLU, Mul, down MatMul) and the router (MatMul, Softmax, TopK,"
        " ScatterElements) all read the input and are mutually independent until the weighted sum",
    ),
    Spec(
        "mlp_chain.onnx", build_mlp_chain,
        "MlpChain: Linear(64,256)-ReLU-Linear(256,64)-Tanh-Linear(64,16)",
        "hand-written torch module models/tiny_archs.py:MlpChain, random init",
        False,
        "negative control: a strict chain, no two compute nodes are independent",
    ),
]

# ----------------------------------------------------------------------------------------------
# export + checks
# ----------------------------------------------------------------------------------------------


def strip_metadata(model: onnx.ModelProto) -> None:
    """Drop exporter bookkeeping (stack traces, original node names): smaller, deterministic files."""
    for n in model.graph.node:
        del n.metadata_props[:]
        n.doc_string = ""
    for vi in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        del vi.metadata_props[:]
    for init in model.graph.initializer:
        del init.metadata_props[:]
    del model.graph.metadata_props[:]
    del model.metadata_props[:]
    model.doc_string = ""
    model.graph.doc_string = ""


def finalize(model: onnx.ModelProto, meta: dict[str, str]) -> onnx.ModelProto:
    """Re-infer all intermediate shapes (strict), check, return the model with value_info filled in."""
    del model.graph.value_info[:]
    model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    for k, v in meta.items():
        p = model.metadata_props.add()
        p.key, p.value = k, v
    onnx.checker.check_model(model, full_check=True)
    assert_static(model)
    return model


def _shape_of(vi: onnx.ValueInfoProto) -> list:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]


def assert_static(model: onnx.ModelProto) -> None:
    bad = []
    for vi in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        if not vi.type.HasField("tensor_type"):
            bad.append((vi.name, "not a tensor"))
            continue
        s = _shape_of(vi)
        if s is None or any(not isinstance(d, int) or d <= 0 for d in s):
            bad.append((vi.name, s))
    produced = {o for n in model.graph.node for o in n.output if o}
    known = {vi.name for vi in list(model.graph.value_info) + list(model.graph.output)}
    missing = sorted(produced - known)
    if bad or missing:
        raise AssertionError(f"non-static shapes: {bad[:10]}; no inferred shape for {missing[:10]}")


def export_float(built: Built) -> onnx.ModelProto:
    torch = _torch()
    args = tuple(torch.from_numpy(a) for a in example_inputs(built, SEED).values())
    with torch.no_grad():
        prog = torch.onnx.export(
            built.module, args, dynamo=True, opset_version=OPSET, input_names=list(built.inputs),
            output_names=built.output_names, optimize=True, verbose=False, external_data=False,
        )
    model = prog.model_proto
    # second optimizer pass (idempotent in practice; folds anything the first left behind)
    import onnxscript.optimizer

    model = onnxscript.optimizer.optimize(model)
    strip_metadata(model)
    return model


def example_inputs(built: Built, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: make_input(spec, shape, dt, rng) for name, (shape, dt, spec) in built.inputs.items()}


def torch_reference(built: Built, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    torch = _torch()
    with torch.no_grad():
        out = built.module(*(torch.from_numpy(v) for v in feeds.values()))
    if not isinstance(out, (tuple, list)):
        out = (out,)
    return [o.detach().numpy() for o in out]


def ort_run(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    src = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def atomic_write_bytes(path: str, data: bytes) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def quantize_qdq(float_model: onnx.ModelProto, built: Built, n_calib: int, seed: int) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config, qnn_preprocess_model

    class RandomReader(CalibrationDataReader):
        def __init__(self):
            self.feeds = [example_inputs(built, seed + i) for i in range(n_calib)]
            self.i = 0

        def get_next(self):
            if self.i >= len(self.feeds):
                return None
            self.i += 1
            return self.feeds[self.i - 1]

        def rewind(self):
            self.i = 0

    with tempfile.TemporaryDirectory() as td:
        fpath = os.path.join(td, "float.onnx")
        fm = onnx.ModelProto()
        fm.CopyFrom(float_model)
        # onnxruntime 1.32's qnn_preprocess_model crashes on a model that has metadata_props
        # ("TypeError: cannot convert dictionary update sequence element #0 to a sequence"), so drop them.
        del fm.metadata_props[:]
        onnx.save(fm, fpath)
        pre = os.path.join(td, "pre.onnx")
        src = pre if qnn_preprocess_model(fpath, pre) else fpath
        cfg = get_qnn_qdq_config(src, RandomReader(), activation_type=QuantType.QUInt8,
                                 weight_type=QuantType.QUInt8)
        qpath = os.path.join(td, "qdq.onnx")
        quantize(src, qpath, cfg)
        q = onnx.load(qpath)
    strip_metadata(q)
    return q


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def io_entry(model: onnx.ModelProto) -> dict:
    def dt(vi):
        return onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name

    return {
        "inputs": {i.name: _shape_of(i) for i in model.graph.input},
        "dtype": {i.name: dt(i) for i in model.graph.input},
        "outputs": {o.name: _shape_of(o) for o in model.graph.output},
        "output_dtype": {o.name: dt(o) for o in model.graph.output},
    }


def summarize(model: onnx.ModelProto) -> dict:
    hist = collections.Counter(n.op_type for n in model.graph.node)
    return {
        "opset": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "ir_version": model.ir_version,
        "nodes": len(model.graph.node),
        "op_counts": dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def max_rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-12))


def build_all(out_dir: str, n_calib: int = 8) -> dict:
    import onnxruntime
    import torch
    import transformers

    os.makedirs(out_dir, exist_ok=True)
    tool_versions = {
        "torch": torch.__version__, "transformers": transformers.__version__, "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
    }
    entries = []
    for spec in SPECS:
        t0 = time.time()
        built = spec.build()
        model = export_float(built)
        model = finalize(model, {"hexfuse.source": spec.source, "hexfuse.builder": "models/build_models.py"})
        feeds = example_inputs(built, SEED)
        ref = torch_reference(built, feeds)
        got = ort_run(model, feeds)
        assert len(ref) == len(got), (spec.file, len(ref), len(got))
        errs = [max_rel_err(g, r) for g, r in zip(got, ref)]
        assert max(errs) < 1e-4, (spec.file, errs)
        data = model.SerializeToString()
        assert len(data) < 2_000_000, (spec.file, len(data))
        atomic_write_bytes(os.path.join(out_dir, spec.file), data)
        value_specs = {name: s for name, (_, _, s) in built.inputs.items()}
        entry = {
            "file": spec.file, "kind": "float", "architecture": spec.architecture, "source": spec.source,
            **io_entry(model), "input_values": value_specs,
            "independent_branches": spec.independent_branches, "branches": spec.branches,
        }
        if spec.requests:
            entry["requests"] = spec.requests
        entry.update(summarize(model))
        entry.update({"size_bytes": len(data), "sha256": sha256(data),
                      "verified_against_torch_max_rel_err": float(f"{max(errs):.3g}")})
        entries.append(entry)
        print(f"[build] {spec.file}: {len(model.graph.node)} nodes, {len(data)} bytes, "
              f"max rel err vs torch {max(errs):.2e} ({time.time() - t0:.1f}s)", flush=True)

        if spec.qdq:
            t0 = time.time()
            qfile = spec.file.replace(".onnx", "_qdq.onnx")
            q = quantize_qdq(model, built, n_calib, SEED + 100)
            q = finalize(q, {"hexfuse.source": f"QDQ (QNN config, uint8 act / uint8 weight) of {spec.file}",
                             "hexfuse.builder": "models/build_models.py"})
            qgot = ort_run(q, feeds)
            qerrs = [max_rel_err(g, r) for g, r in zip(qgot, got)]
            assert all(np.all(np.isfinite(x)) for x in qgot), qfile
            qdata = q.SerializeToString()
            assert len(qdata) < 2_000_000, (qfile, len(qdata))
            atomic_write_bytes(os.path.join(out_dir, qfile), qdata)
            qentry = {
                "file": qfile, "kind": "qdq", "architecture": spec.architecture,
                "source": f"onnxruntime.quantization.quantize with get_qnn_qdq_config (after qnn_preprocess_model)"
                          f" of {spec.file}",
                "float_model": spec.file,
                "quantization": {"activation": "uint8", "weight": "uint8", "calibrate_method": "MinMax",
                                 "calibration": f"{n_calib} random input sets (input_values specs), seeds "
                                                f"{SEED + 100}..{SEED + 100 + n_calib - 1}"},
                **io_entry(q), "input_values": value_specs,
                "independent_branches": spec.independent_branches, "branches": spec.branches,
            }
            if spec.requests:
                qentry["requests"] = spec.requests
            qentry.update(summarize(q))
            qentry.update({"size_bytes": len(qdata), "sha256": sha256(qdata),
                           "max_rel_err_vs_float": float(f"{max(qerrs):.3g}")})
            entries.append(qentry)
            print(f"[build] {qfile}: {len(q.graph.node)} nodes, {len(qdata)} bytes, "
                  f"max rel err vs float {max(qerrs):.2e} ({time.time() - t0:.1f}s)", flush=True)

    catalog = {
        "about": "Small ONNX models with random weights built by models/build_models.py; see models/README.md."
                 " input_values: how to make valid random inputs (randn | randint[low,high) | ones | const).",
        "build_command": "python models/build_models.py --out models/",
        "exporter": f"torch.onnx.export(dynamo=True, opset_version={OPSET}) + onnxscript optimizer",
        "tool_versions": tool_versions,
        "models": entries,
    }
    atomic_write_bytes(os.path.join(out_dir, CATALOG), (json.dumps(catalog, indent=2) + "\n").encode())
    return catalog


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)), help="output directory")
    ap.add_argument("--calib", type=int, default=8, help="calibration samples for the QDQ models")
    a = ap.parse_args(argv)
    cat = build_all(a.out, a.calib)
    print(f"[build] wrote {len(cat['models'])} models + {CATALOG} to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
