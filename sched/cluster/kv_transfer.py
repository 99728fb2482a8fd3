"""The KV cache's move from a prefill replica to a decode replica (docs/capacity.md).

A prompt of ``P`` tokens leaves ``layers × 2 (K and V) × kv_heads × head_dim ×
bytes_per_element × P`` bytes of KV on its prefill replica; moving it costs that over
the link's bandwidth plus a per-transfer latency (connection set-up, descriptor
exchange, the first byte). With **layer-wise overlap** (DistServe, Mooncake, vLLM's
NIXL connector send each layer's KV while the next layer computes) only the last
layer's share is left after the prefill ends, provided the link keeps up with the
compute (the optimistic bound; docs/capacity.md says when it does not hold).

Link presets carry datasheet bandwidths, one direction, per GPU (the figure a
point-to-point copy can reach at best); their latencies are nominal figures, not
datasheet ones, and every value can be replaced by the user's (:func:`link`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from servecal.util.errors import InputError


@dataclass(frozen=True)
class KVShape:
    """A model's KV per token: ``layers × 2 × kv_heads × head_dim × bytes_per_element``."""

    layers: int
    kv_heads: int
    head_dim: int
    bytes_per_element: float = 2.0  # bf16 / fp16; 1 for an fp8 KV cache

    def __post_init__(self) -> None:
        if min(self.layers, self.kv_heads, self.head_dim) < 1 or not self.bytes_per_element > 0:
            raise ValueError("a KV shape needs layers, kv_heads, head_dim >= 1, bytes > 0")

    @property
    def bytes_per_token(self) -> float:
        return self.layers * 2 * self.kv_heads * self.head_dim * self.bytes_per_element


@dataclass(frozen=True)
class Link:
    """A prefill→decode link: ``gbytes_per_s`` (10⁹ bytes/s, one direction) and the
    per-transfer ``latency_ms``."""

    name: str
    gbytes_per_s: float
    latency_ms: float = 0.0

    def __post_init__(self) -> None:
        if not self.gbytes_per_s > 0 or not self.latency_ms >= 0:
            raise ValueError(f"link {self.name!r}: bandwidth must be > 0 and latency >= 0")


#: Model shapes by name (their published configs: config.json of each checkpoint).
MODELS: dict[str, KVShape] = {
    "llama-3-8b": KVShape(layers=32, kv_heads=8, head_dim=128),  # 128 KiB/token in bf16
    "llama-3-70b": KVShape(layers=80, kv_heads=8, head_dim=128),
    "qwen2.5-14b": KVShape(layers=48, kv_heads=8, head_dim=128),
}

#: Link presets: datasheet bandwidth per direction per GPU; nominal latencies.
LINKS: dict[str, Link] = {
    # NVLink 4 (H100 SXM): 900 GB/s total bidirectional per GPU → 450 GB/s each way
    "nvlink": Link("nvlink", 450.0, 0.01),
    # InfiniBand NDR: 400 Gb/s per port (one ConnectX-7 per GPU) → 50 GB/s
    "ib-ndr": Link("ib-ndr", 50.0, 0.02),
    # RoCE v2 on 100 GbE / 400 GbE → 12.5 / 50 GB/s
    "roce-100g": Link("roce-100g", 12.5, 0.05),
    "roce-400g": Link("roce-400g", 50.0, 0.05),
    # PCIe Gen5 x16: 32 GT/s × 16 lanes, 128b/130b → 63 GB/s each way (host-staged copy)
    "pcie-gen5": Link("pcie-gen5", 63.0, 0.02),
    # an ideal link: what a run without transfer cost looks like (tests, bounds)
    "infinite": Link("infinite", math.inf, 0.0),
}


def link(value: Any, where: str = "link") -> Link:
    """A preset by name, or ``{name, gbytes_per_s, latency_ms}`` (the user's figures; a
    preset's name with only ``latency_ms`` keeps its bandwidth)."""
    if isinstance(value, str):
        found = LINKS.get(value)
        if found is None:
            raise InputError(f"{where} = {value!r}: unknown link; known: {', '.join(LINKS)}")
        return found
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise InputError(f"{where}: expected a link name or {{name, gbytes_per_s, latency_ms}}")
    stray = set(value) - {"name", "gbytes_per_s", "latency_ms"}
    if stray:
        raise InputError(f"{where}: unknown key {sorted(stray)[0]!r}")
    base = LINKS.get(value["name"])
    bw = value.get("gbytes_per_s", base.gbytes_per_s if base else None)
    lat = value.get("latency_ms", base.latency_ms if base else 0.0)
    if not isinstance(bw, (int, float)) or not isinstance(lat, (int, float)):
        raise InputError(f"{where}: gbytes_per_s and latency_ms must be numbers")
    try:
        return Link(value["name"], float(bw), float(lat))
    except ValueError as e:
        raise InputError(f"{where}: {e}") from None


def model_shape(value: Any, where: str = "model") -> KVShape:
    """A model by name (:data:`MODELS`) or ``{layers, kv_heads, head_dim,
    bytes_per_element}``."""
    if isinstance(value, str):
        found = MODELS.get(value.lower())
        if found is None:
            raise InputError(f"{where} = {value!r}: unknown model; known: {', '.join(MODELS)}")
        return found
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a model name or {{layers, kv_heads, head_dim}}")
    try:
        return KVShape(**value)
    except (TypeError, ValueError) as e:
        raise InputError(f"{where}: {e}") from None


def transfer_ms(shape: KVShape, via: Link, tokens: int, layerwise: bool = False) -> float:
    """Milliseconds from the end of a ``tokens``-token prefill until its KV is on the
    decode replica: bytes / bandwidth + latency; with ``layerwise`` overlap only the
    last layer's bytes are left to send."""
    seconds = shape.bytes_per_token * tokens / (via.gbytes_per_s * 1e9)
    if layerwise:
        seconds /= shape.layers
    return seconds * 1000.0 + via.latency_ms
