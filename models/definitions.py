"""The model definitions the builder exports: tiny random-weight architectures and their catalog specs.

Imported by build_models.py only (needs torch, transformers); nothing else in hexfuse imports this.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

SEED = 1234


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


def _llama():
    """The tiny Llama of every llama_* file: same seed, so the same weights in each of them."""
    torch = _torch()
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED + 2)
    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=LLAMA_LAYERS,
        num_attention_heads=4, num_key_value_heads=LLAMA_KV_HEADS, head_dim=LLAMA_HEAD_DIM,
        max_position_embeddings=64, attn_implementation="eager", use_cache=True,
    )
    model = LlamaForCausalLM(cfg).eval()
    perturb_constant_params(model, SEED + 2)
    return model


def build_llama() -> Built:
    torch = _torch()
    from transformers import DynamicCache

    model = _llama()
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


def _past_inputs(prefix: str) -> dict[str, tuple[list[int], str, dict]]:
    inputs = {}
    for i in range(LLAMA_LAYERS):
        for kv in ("key", "value"):
            inputs[f"{prefix}past_{kv}_{i}"] = ([1, LLAMA_KV_HEADS, PAST, LLAMA_HEAD_DIM], "float32", {"kind": "randn"})
    return inputs


def _present_outputs() -> list[str]:
    return ["logits"] + [f"present_{kv}_{i}" for i in range(LLAMA_LAYERS) for kv in ("key", "value")]


def build_llama_prefill() -> Built:
    """The prefill request of llama_prefill_decode alone (same weights), exported as its own graph."""
    torch = _torch()
    model = _llama()

    class Prefill(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            out = self.m(input_ids=input_ids, use_cache=True)
            cache = out.past_key_values.layers
            return (out.logits, *(t for layer in cache for t in (layer.keys, layer.values)))

    return Built(Prefill(model).eval(), {"input_ids": ([1, SEQ], "int64", ids_spec)}, _present_outputs())


def build_llama_decode() -> Built:
    """The decode request of llama_prefill_decode alone (same weights): 1 token over a 15-position cache."""
    torch = _torch()
    from transformers import DynamicCache

    model = _llama()
    L = LLAMA_LAYERS

    class Decode(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, position_ids, *past):
            cache = DynamicCache(config=self.m.config)
            for i in range(L):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, position_ids=position_ids, past_key_values=cache, use_cache=True)
            layers = out.past_key_values.layers
            return (out.logits, *(t for layer in layers for t in (layer.keys, layer.values)))

    inputs = {
        "input_ids": ([1, 1], "int64", ids_spec),
        "position_ids": ([1, 1], "int64", {"kind": "const", "value": PAST}),
        **_past_inputs(""),
    }
    return Built(Decode(model).eval(), inputs, _present_outputs())


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
        "llama_prefill.onnx", build_llama_prefill,
        "LlamaForCausalLM (the llama_prefill_decode weights): the prefill request alone, 16 tokens, no cache",
        "transformers LlamaForCausalLM, random init (seed of llama_prefill_decode), exported alone; merge it with"
        " llama_decode.onnx by `hexfuse merge`",
        True,
        "inside the request, Q/K/V projections (and the gate/up MLP projections) read the same norm output",
        qdq=True,
    ),
    Spec(
        "llama_decode.onnx", build_llama_decode,
        "LlamaForCausalLM (the llama_prefill_decode weights): the decode request alone, 1 token over a 15-position"
        " KV cache",
        "transformers LlamaForCausalLM, random init (seed of llama_prefill_decode), exported alone; merge it with"
        " llama_prefill.onnx by `hexfuse merge`",
        True,
        "inside the request, Q/K/V projections (and the gate/up MLP projections) read the same norm output",
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

