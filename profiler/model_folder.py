"""A servecal model shape as a Hugging Face model folder (``config.json`` only).

vLLM serves it with ``--load-format dummy``: random weights, the real kernels. Both
``servecal calibrate --engine vllm`` (the profiler) and ``servecal bench`` (the
integrations) start vLLM on one, so it lives here, below both.

A dense shape becomes a Llama; a mixture-of-experts shape a Qwen MoE, the one
family vLLM serves whose config keeps the dense ``intermediate_size`` apart from
the experts' width (``moe_intermediate_size``), so the folder's ``config.json``
carries every field of the shape and the plug-in's model check matches it:
Qwen3-MoE (``Qwen3MoeForCausalLM``) without shared experts, Qwen2-MoE
(``Qwen2MoeForCausalLM``: one gated shared expert of width ``shared_experts ×
expert_intermediate``) with them. Both route with vLLM's own top-k router (softmax,
top-k renormalised) on random weights, so the routing is what random weights give,
not the shape's ``routing_skew``; the attention differs from Llama's a little
(Qwen3: a norm on q and k; Qwen2: a bias on q, k, v).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servecal.profiler.shapes import ModelShape


def _moe_config(shape: ModelShape) -> dict[str, Any]:
    """The MoE fields of a Qwen3-MoE / Qwen2-MoE ``config.json`` for ``shape``."""
    common = {
        "num_experts": shape.experts,
        "num_experts_per_tok": shape.top_k,
        "moe_intermediate_size": shape.expert_intermediate,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "output_router_logits": False,
    }
    if not shape.shared_experts:
        return {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                "attention_bias": False, **common}  # fmt: skip
    width = shape.shared_experts * shape.expert_intermediate
    return {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
            "shared_expert_intermediate_size": width, **common}  # fmt: skip


def write_model_folder(shape_name: str, folder: Path, max_position: int = 32768) -> Path:
    """A model folder (``config.json`` only) with a servecal model shape's dimensions,
    for ``--load-format dummy``: random weights, real kernels (Llama for a dense
    shape, a Qwen MoE for a MoE one: the module doc)."""
    shape = ModelShape.resolve(shape_name)
    arch: dict[str, Any] = (
        _moe_config(shape)
        if shape.is_moe
        else {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    )
    config = {
        **arch,
        "num_hidden_layers": shape.n_layers,
        "hidden_size": shape.hidden,
        "num_attention_heads": shape.n_heads,
        "num_key_value_heads": shape.n_kv_heads,
        "head_dim": shape.head_dim,
        "intermediate_size": shape.intermediate,
        "vocab_size": shape.vocab,
        "rope_theta": shape.rope_theta,
        "rms_norm_eps": shape.norm_eps,
        "max_position_embeddings": max_position,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder
