"""Quantized against bf16 step times of Llama-3-8B, composed from aiconfigurator's tables.

H100: imports the same grid four times from aiconfigurator's H100 vLLM 0.24 operator tables
(``sched/data/aiconfigurator_h100_sxm_vllm0.24_llama-3-8b/``): weights bf16 or fp8
(``--dtype``), KV cache bf16 or fp8 (``--kv-dtype``). B200 (``--b200``): the same from its
B200 tables (``sched/data/aiconfigurator_b200_sxm_vllm0.24_llama-3-8b/``), where the dense
GEMMs also have 4-bit (``nvfp4``) weight rows: fp8 or nvfp4 weights, bf16 or fp8 KV.
Prints the median ratio of step times to the bf16/bf16 ones per regime (small and large
decode batches, short and long contexts, prefills).

    python benchmarks/fp8_ratios.py          # ~5 s
    python benchmarks/fp8_ratios.py --aiconfigurator   # + aiconfigurator's own, ~30 s
    python benchmarks/fp8_ratios.py --b200 --aiconfigurator   # the B200 4-bit rows

``--aiconfigurator`` also prints the same ratios from aiconfigurator's own step estimates
(``aiconfigurator-core`` 0.12.0 from PyPI: ``EngineHandle.compile`` of
``meta-llama/Meta-Llama-3.1-8B`` on ``h100_sxm`` (``b200_sxm``), vLLM 0.24.0, with
``gemm_quant_mode`` and ``kvcache_quant_mode`` set; ``predict_decode_latency(bs, ctx, 2)``
and ``predict_prefill_latency(1, tokens)`` at the same regimes' points).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from servecal.profiler.design import Grid
from servecal.profiler.importers import import_profile
from servecal.profiler.shapes import ModelShape

DATA = Path(__file__).resolve().parents[1] / "sched" / "data"
PROFILE = DATA / "aiconfigurator_h100_sxm_vllm0.24_llama-3-8b"
#: name -> (profile folder, pointwise device, aiconfigurator system, (weight, KV) variants)
GPUS = {
    "H100": (PROFILE, "h100-sxm", "h100_sxm",
             (("fp8", "bfloat16"), ("bfloat16", "fp8"), ("fp8", "fp8"))),
    "B200": (DATA / "aiconfigurator_b200_sxm_vllm0.24_llama-3-8b", "b200-sxm", "b200_sxm",
             (("fp8", "bfloat16"), ("nvfp4", "bfloat16"), ("nvfp4", "fp8"))),
}  # fmt: skip
GRID = Grid(
    n_decode=(0, 1, 8, 32, 128, 256),
    chunk=(0, 512, 2048, 8192),
    ctx=(1024, 8192),
    prefix=(0,),
)


def decode(low: int, high: int, ctx: int):
    return lambda f: (f.chunk == 0) & f.n_decode.between(low, high) & (f.ctx == ctx)


REGIMES = {
    "decode, 1-8 requests, ctx 1,024": decode(1, 8, 1024),
    "decode, 1-8 requests, ctx 8,192": decode(1, 8, 8192),
    "decode, 128-256 requests, ctx 1,024": decode(128, 256, 1024),
    "decode, 128-256 requests, ctx 8,192": decode(128, 256, 8192),
    "prefill 512": lambda f: (f.n_decode == 0) & (f.chunk == 512),
    "prefill 2,048-8,192": lambda f: (f.n_decode == 0) & (f.chunk >= 2048),
}


def steps(weight: str, kv: str, gpu: str = "H100"):
    shape = ModelShape.from_name("llama-3-8b")
    profile, device, _, _ = GPUS[gpu]
    frame, _ = import_profile(
        "aiconfigurator", profile, shape, 1, GRID, pointwise_device=device,
        weight_dtype=weight, kv_dtype=kv,
    )  # fmt: skip
    return frame.sort_values(["n_decode", "chunk", "ctx", "prefix"]).reset_index(drop=True)


#: The regimes' points for aiconfigurator: (decode batch, context) or (prefill tokens).
AIC_POINTS = {
    "decode, 1-8 requests, ctx 1,024": [("decode", b, 1024) for b in (1, 8)],
    "decode, 1-8 requests, ctx 8,192": [("decode", b, 8192) for b in (1, 8)],
    "decode, 128-256 requests, ctx 1,024": [("decode", b, 1024) for b in (128, 256)],
    "decode, 128-256 requests, ctx 8,192": [("decode", b, 8192) for b in (128, 256)],
    "prefill 512": [("prefill", 1, 512)],
    "prefill 2,048-8,192": [("prefill", 1, n) for n in (2048, 8192)],
}


def aiconfigurator_ratios(gpu: str = "H100") -> dict[str, list[float]]:
    """Per regime, aiconfigurator's quantized/bf16 step-time ratios (the same variants)."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    _, _, system, variants = GPUS[gpu]

    def handle(weight: str, kv: str):
        return EngineHandle.compile(
            "meta-llama/Meta-Llama-3.1-8B", system, "vllm", backend_version="0.24.0",
            tp_size=1, gemm_quant_mode=weight, kvcache_quant_mode=kv,
        )  # fmt: skip

    def times(h) -> dict[str, np.ndarray]:
        out = {}
        for name, points in AIC_POINTS.items():
            out[name] = np.array([
                h.predict_decode_latency(b, n, 2) if kind == "decode"
                else h.predict_prefill_latency(b, n)
                for kind, b, n in points
            ])  # fmt: skip
        return out

    base = times(handle("bfloat16", "bfloat16"))
    quantized = [times(handle(w, k)) for w, k in variants]
    return {name: [float(np.median(v[name] / base[name])) for v in quantized]
            for name in AIC_POINTS}  # fmt: skip


def main() -> int:
    gpu = "B200" if "--b200" in sys.argv[1:] else "H100"
    base = steps("bfloat16", "bfloat16", gpu)
    variants = {f"{w}/{k}": steps(w, k, gpu) for w, k in GPUS[gpu][3]}
    print(f"{gpu}, Llama-3-8B, TP 1")
    print(f"{'regime (weights/KV vs bf16/bf16)':<38} " + " ".join(f"{v:>15}" for v in variants))
    for name, select in REGIMES.items():
        rows = select(base).to_numpy()
        cells = [
            np.median(f.ms.to_numpy()[rows] / base.ms.to_numpy()[rows]) for f in variants.values()
        ]
        print(f"{name:<38} " + " ".join(f"{c:>15.3f}" for c in cells))
    if "--aiconfigurator" in sys.argv[1:]:
        print("\naiconfigurator's own estimates (aiconfigurator-core 0.12.0):")
        for name, cells in aiconfigurator_ratios(gpu).items():
            print(f"{name:<38} " + " ".join(f"{c:>15.3f}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
