"""A servecal model shape as a Hugging Face model folder (``config.json`` only).

vLLM serves it with ``--load-format dummy``: random weights, the real kernels. Both
``servecal calibrate --engine vllm`` (the profiler) and ``servecal bench`` (the
integrations) start vLLM on one, so it lives here, below both.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_model_folder(shape_name: str, folder: Path, max_position: int = 32768) -> Path:
    """A Llama-architecture model folder (``config.json`` only) with a servecal model
    shape's dimensions, for ``--load-format dummy``: random weights, real kernels."""
    from servecal.profiler.shapes import ModelShape

    shape = ModelShape.resolve(shape_name)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
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
