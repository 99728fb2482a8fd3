"""Model shapes: the handful of dimensions that decide what an iteration costs.

Timing does not depend on weight values, so a shape is all the profiler needs to
build a stand-in transformer. Shipped shapes copy the dimensions of the public
Hugging Face configs; a user can pass their own as a JSON or TOML file with the
same fields (``name`` optional, defaults to the file's stem).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from servecal.profiler.files import load_mapping
from servecal.util.errors import InputError

#: Largest tensor-parallel degree accepted anywhere (the largest NVLink domains hold 72).
MAX_TP = 1024


#: The mixture-of-experts fields and their dense defaults. A dense shape leaves them
#: out of its dict and hash, so dense fingerprints are what they were before MoE.
MOE_DEFAULTS: dict[str, Any] = {
    "experts": 0,
    "top_k": 0,
    "expert_intermediate": 0,
    "shared_experts": 0,
    "ep": 1,
    "routing_skew": 0.0,
}


@dataclass(frozen=True)
class ModelShape:
    """Dimensions of a decoder-only transformer (Llama family layout).

    Mixture of experts (``experts > 0``, docs/profiler.md#mixture-of-experts): every
    layer's MLP is a router over ``experts`` SwiGLU experts of width
    ``expert_intermediate``, each token going to ``top_k`` of them, plus
    ``shared_experts`` experts every token uses; ``ep``: the expert-parallel size
    (each rank holds ``experts / ep`` experts; tokens reach them by an all-to-all);
    ``routing_skew``: how unevenly tokens spread over experts (0: uniform; ``s > 0``:
    expert ``e``'s share of the routed tokens ∝ ``(e + 1)^-s``, a Zipf law, so the
    busiest expert — the one a step waits for — gets more). ``intermediate`` is
    unused by a MoE MLP.
    """

    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0
    ep: int = 1
    routing_skew: float = 0.0

    def __post_init__(self) -> None:
        for f in ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "intermediate"):
            value = getattr(self, f)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ModelShape.{f} must be a positive integer, got {value!r}")
        if not isinstance(self.vocab, int) or self.vocab < 1:
            raise ValueError(f"ModelShape.vocab must be a positive integer, got {self.vocab!r}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"ModelShape.n_heads ({self.n_heads}) must be a multiple of "
                f"n_kv_heads ({self.n_kv_heads}) for grouped-query attention"
            )
        if self.head_dim % 2:
            raise ValueError(f"ModelShape.head_dim must be even for RoPE, got {self.head_dim}")
        if self.rope_theta <= 0 or self.norm_eps <= 0:
            raise ValueError("ModelShape.rope_theta and norm_eps must be > 0")
        self._check_moe()

    def _check_moe(self) -> None:
        if not self.experts:
            moe = {k: getattr(self, k) for k in MOE_DEFAULTS if getattr(self, k) != MOE_DEFAULTS[k]}
            if moe:
                raise ValueError(f"ModelShape: {', '.join(moe)} need experts > 0")
            return
        for f in ("experts", "top_k", "expert_intermediate", "ep"):
            value = getattr(self, f)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ModelShape.{f} must be a positive integer, got {value!r}")
        if self.top_k > self.experts:
            raise ValueError(f"ModelShape.top_k ({self.top_k}) exceeds experts ({self.experts})")
        if self.experts % self.ep:
            raise ValueError(f"ModelShape.ep ({self.ep}) must divide experts ({self.experts})")
        if not isinstance(self.shared_experts, int) or self.shared_experts < 0:
            raise ValueError("ModelShape.shared_experts must be an integer >= 0")
        if not self.routing_skew >= 0:
            raise ValueError("ModelShape.routing_skew must be >= 0")

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_label(self) -> str | None:
        """``E8 top-2 ffn 256 shared 1 EP 2 skew 0.5`` (None for a dense shape)."""
        if not self.is_moe:
            return None
        shared = f" shared {self.shared_experts}" if self.shared_experts else ""
        skew = f" skew {self.routing_skew:g}" if self.routing_skew else ""
        return (
            f"E{self.experts} top-{self.top_k} ffn {self.expert_intermediate}{shared} "
            f"EP {self.ep}{skew}"
        )

    @property
    def hash(self) -> str:
        """Short content hash of the dimensions (the name is a label, not part of it)."""
        dims = {k: v for k, v in self.to_dict().items() if k != "name"}
        blob = json.dumps(dims, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def to_dict(self) -> dict[str, Any]:
        """Every field; the MoE ones only for a MoE shape (dense dicts as before MoE)."""
        out = asdict(self)
        if not self.is_moe:
            for key in MOE_DEFAULTS:
                del out[key]
        return out

    def check_tp(self, tp: int) -> None:
        """Refuse a tensor-parallel degree this shape cannot be split by (as vLLM does):
        query heads, MLP width and vocabulary divide by ``tp``; KV heads divide by it or
        it by them (then each KV head is replicated on ``tp / n_kv_heads`` ranks)."""
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise InputError(f"--tp must be an integer >= 1, got {tp!r}")
        if tp > MAX_TP:
            raise InputError(f"--tp {tp}: at most {MAX_TP}")
        parts = {"query heads": self.n_heads, "MLP width": self.intermediate, "vocab": self.vocab}
        bad = [f"{what} {n}" for what, n in parts.items() if n % tp]
        if self.n_kv_heads % tp and tp % self.n_kv_heads:
            bad.append(f"KV heads {self.n_kv_heads} (nor {tp} by them)")
        if bad:
            raise InputError(f"--tp {tp} does not divide {self.name}'s {', '.join(bad)}")

    def shard(self, tp: int) -> ModelShape:
        """One rank's share at tensor-parallel degree ``tp`` (Megatron/vLLM split).

        Query heads, MLP width and vocabulary are split; the hidden size, head size
        and layer count are not. KV heads are split while there are at least ``tp``
        of them, else each rank holds one (replicated). ``shard(1)`` is the shape itself.
        """
        self.check_tp(tp)
        if tp == 1:
            return self
        return ModelShape(
            name=f"{self.name}/tp{tp}",
            n_layers=self.n_layers,
            hidden=self.hidden,
            n_heads=self.n_heads // tp,
            n_kv_heads=max(1, self.n_kv_heads // tp),
            head_dim=self.head_dim,
            intermediate=self.intermediate // tp,
            vocab=self.vocab // tp,
            rope_theta=self.rope_theta,
            norm_eps=self.norm_eps,
            **{k: getattr(self, k) for k in MOE_DEFAULTS},
        )

    @classmethod
    def from_name(cls, name: str) -> ModelShape:
        """A shipped shape by name (see :data:`SHAPES`)."""
        try:
            return SHAPES[name]
        except KeyError:
            known = ", ".join(sorted(SHAPES))
            raise InputError(
                f"unknown model shape {name!r}; known: {known}, or a .json/.toml file"
            ) from None

    @classmethod
    def from_file(cls, path: str | Path) -> ModelShape:
        """A user shape from a JSON or TOML file with :class:`ModelShape`'s fields."""
        path = Path(path)
        data = load_mapping(path, "model shape")
        data.setdefault("name", path.stem)
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise InputError(f"{path}: unknown model shape field(s) {', '.join(unknown)}")
        missing = [m for m in _REQUIRED if m not in data]
        if missing:
            raise InputError(f"{path}: model shape is missing field(s) {', '.join(missing)}")
        try:
            return cls(**data)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{path}: {exc}") from None

    @classmethod
    def resolve(cls, spec: str) -> ModelShape:
        """A shipped name, or a path ending in ``.json``/``.toml``."""
        if spec in SHAPES:
            return SHAPES[spec]
        if spec.endswith((".json", ".toml")) or Path(spec).is_file():
            return cls.from_file(spec)
        return cls.from_name(spec)


_REQUIRED = ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "intermediate", "vocab")

# Public configs (config.json on the Hugging Face hub). Qwen2.5's QKV bias and
# sliding-window details do not change the cost shape enough to model here.
SHAPES: dict[str, ModelShape] = {
    s.name: s
    for s in (
        # name, layers, hidden, heads, kv heads, head dim, intermediate, vocab, rope theta
        ModelShape("llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, 500000.0),
        ModelShape("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256, 500000.0),
        ModelShape("qwen2.5-14b", 48, 5120, 40, 8, 128, 13824, 152064, 1000000.0, 1e-6),
        ModelShape("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, 10000.0),
        # The CPU default: small enough that one iteration of the CPU grid takes
        # about 0.5-20 ms on one core, so a 90 s budget covers the grid with 20+ repeats.
        ModelShape("tiny", 4, 128, 4, 2, 32, 384, 2048, 10000.0),
        # tiny's attention with a MoE MLP: 8 experts of width 192, top-2, one shared
        # expert (a CPU stand-in for Qwen3-MoE / DeepSeek's layout)
        ModelShape(
            "tiny-moe",
            4,
            128,
            4,
            2,
            32,
            384,
            2048,
            10000.0,
            experts=8,
            top_k=2,
            expert_intermediate=192,
            shared_experts=1,
        ),  # fmt: skip
        # Public MoE configs: Mixtral-8x7B (8 experts, top-2) and Qwen3-30B-A3B
        # (128 experts of width 768, top-8; 48 layers, 32 query / 4 KV heads of 128)
        ModelShape(
            "mixtral-8x7b",
            32,
            4096,
            32,
            8,
            128,
            14336,
            32000,
            1000000.0,
            experts=8,
            top_k=2,
            expert_intermediate=14336,
        ),  # fmt: skip
        ModelShape(
            "qwen3-30b-a3b",
            48,
            2048,
            32,
            4,
            128,
            6144,
            151936,
            1000000.0,
            1e-6,
            experts=128,
            top_k=8,
            expert_intermediate=768,
        ),  # fmt: skip
    )
}
