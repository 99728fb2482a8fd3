"""Per-layer pointwise kernels a GEMM/attention profile leaves out, priced from bytes moved.

aiconfigurator's tables time the GEMMs and attention only; a real layer also runs
memory-bound pointwise kernels. What vLLM runs per Llama layer on ``T`` tokens (per GPU
at TP ``N``; bf16, 2 bytes a value):

* 2 × fused add + RMSNorm (input and post-attention norm, each folding in the
  residual add): reads x and the residual, writes both: ``4·T·hidden`` values each;
* rotary embedding on q and k, in place: ``2·T·(q_heads + kv_heads)·head_dim``;
* KV-cache write (``reshape_and_cache``): reads k, v and writes them into the
  cache: ``4·T·kv_heads·head_dim``;
* SiLU-and-mul: reads ``T·2·I/N``, writes ``T·I/N``: ``3·T·I/N``.

Qwen3 (and any model with ``qk_norm``) also RMS-normalises q and k per head before
rotary: two more kernels (``qk_norm=True``, ``--qk-norm``), reading and writing
``T·(q_heads + kv_heads)·head_dim`` values together.

Each kernel costs ``launch_ms + bytes / bandwidth``. Bandwidths are the vendor
datasheets' peak HBM figures (:data:`BANDWIDTH_GBPS`); the per-kernel fixed cost
(:data:`LAUNCH_MS`) is the median of Vidur's A100 pointwise op times at one token
(the five pointwise ops of Llama-2-7B, Llama-3-8B and Llama-3-70B at TP 1, 2, 4, where
the bytes moved are negligible; ``tests/data/profiler/vidur_pointwise_1token.csv``
holds those rows and a test recomputes the median).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

BF16_BYTES = 2
#: Pointwise kernels per layer (2 fused add+norm, rotary, KV-cache write, activation).
KERNELS_PER_LAYER = 5
#: Per-head q and k RMSNorm (Qwen3's ``q_norm``, ``k_norm``): one kernel each.
QK_NORM_KERNELS = 2
#: Fixed cost of one small pointwise kernel (ms): median of Vidur's A100 1-token op times.
LAUNCH_MS = 0.005
#: Peak HBM bandwidth (GB/s) by device, from the vendors' datasheets: NVIDIA A100
#: datasheet (80GB PCIe 1,935; 80GB SXM 2,039; 40GB 1,555) and H100 datasheet
#: (SXM 3,350; PCIe 2,000; NVL 3,900).
BANDWIDTH_GBPS = {
    "a100-pcie-40gb": 1555.0,
    "a100-sxm-40gb": 1555.0,
    "a100-pcie-80gb": 1935.0,
    "a100-sxm-80gb": 2039.0,
    "h100-pcie": 2000.0,
    "h100-sxm": 3350.0,
    "h100-nvl": 3900.0,
    "b200-sxm": 8000.0,
}
DATASHEETS = "NVIDIA A100 and H100 datasheets (peak HBM bandwidth)"
#: Devices whose figure is from another datasheet (the A100 and H100 ones keep
#: :data:`DATASHEETS`, so their imports' fingerprints are unchanged).
OTHER_SOURCES = {
    "b200-sxm": "NVIDIA HGX B200 specifications (8 TB/s HBM3e per GPU)",
}


def device_key(name: str) -> str:
    """The :data:`BANDWIDTH_GBPS` key for a device name ("NVIDIA A100-SXM4-80GB", "h100-sxm")."""
    low = name.lower().replace("_", "-").replace(" ", "-")
    if low in BANDWIDTH_GBPS:
        return low
    if "a100" in low:
        form = "pcie" if "pcie" in low else "sxm"
        size = "40gb" if "40gb" in low else "80gb"
        return f"a100-{form}-{size}"
    if "h100" in low:
        return "h100-pcie" if "pcie" in low else "h100-nvl" if "nvl" in low else "h100-sxm"
    if "b200" in low:
        return "b200-sxm"
    raise InputError(
        f"no memory bandwidth known for device {name!r}; choose one of {', '.join(BANDWIDTH_GBPS)}"
    )


@dataclass(frozen=True)
class PointwiseModel:
    """Per-layer pointwise time of one model shape at TP ``tp`` on one device."""

    shape: ModelShape
    tp: int
    device: str  # a BANDWIDTH_GBPS key
    launch_ms: float = LAUNCH_MS
    qk_norm: bool = False  # q and k normalised per head (Qwen3): 2 more kernels

    @property
    def kernels(self) -> int:
        return KERNELS_PER_LAYER + (QK_NORM_KERNELS if self.qk_norm else 0)

    @property
    def bandwidth_gbps(self) -> float:
        return BANDWIDTH_GBPS[self.device]

    def values_per_token(self) -> float:
        """bf16 values the five kernels read and write per token, per GPU."""
        s = self.shape
        q_heads = s.n_heads // self.tp
        kv_heads = max(1, s.n_kv_heads // self.tp)
        norms = 2 * 4 * s.hidden
        rotary = 2 * (q_heads + kv_heads) * s.head_dim
        kv_write = 4 * kv_heads * s.head_dim
        activation = 3 * s.intermediate // self.tp
        qk_norm = 2 * (q_heads + kv_heads) * s.head_dim if self.qk_norm else 0
        return norms + rotary + kv_write + activation + qk_norm

    def layer_ms(self, tokens: int) -> float:
        """All pointwise kernels of one layer on ``tokens`` tokens."""
        moved = tokens * self.values_per_token() * BF16_BYTES
        return self.kernels * self.launch_ms + moved / (self.bandwidth_gbps * 1e6)

    def provenance(self) -> dict[str, Any]:
        return {
            "pointwise_kernels": (
                f"{self.kernels} per layer (2 fused add+RMSNorm, rotary, KV-cache write, "
                "SiLU-and-mul"
                + (", q and k per-head RMSNorm" if self.qk_norm else "")
                + "): launch + bytes / bandwidth"
            ),
            "pointwise_device": self.device,
            "pointwise_bandwidth_gbps": self.bandwidth_gbps,
            "pointwise_bandwidth_source": OTHER_SOURCES.get(self.device, DATASHEETS),
            "pointwise_launch_ms": self.launch_ms,
            "pointwise_launch_source": (
                "median of Vidur's A100 pointwise op times at 1 token (microsoft/vidur @ 7d475133)"
            ),
        }
