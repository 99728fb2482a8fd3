"""fp8 against bf16 step times of Llama-3-8B on H100, composed from aiconfigurator's tables.

Imports the same grid four times from aiconfigurator's H100 vLLM 0.24 operator tables
(``sched/data/aiconfigurator_h100_sxm_vllm0.24_llama-3-8b/``): weights bf16 or fp8
(``--dtype``), KV cache bf16 or fp8 (``--kv-dtype``); prints the median ratio of step
times to the bf16/bf16 ones per regime (small and large decode batches, short and long
contexts, prefills).

    python benchmarks/fp8_ratios.py          # ~5 s
    python benchmarks/fp8_ratios.py --aiconfigurator   # + aiconfigurator's own, ~30 s

``--aiconfigurator`` also prints the same ratios from aiconfigurator's own step estimates
(``aiconfigurator-core`` 0.12.0 from PyPI: ``EngineHandle.compile`` of
``meta-llama/Meta-Llama-3.1-8B`` on ``h100_sxm``, vLLM 0.24.0, with ``gemm_quant_mode`` and
``kvcache_quant_mode`` set; ``predict_decode_latency(bs, ctx, 2)`` and
``predict_prefill_latency(1, tokens)`` at the same regimes' points).
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


def steps(weight: str, kv: str):
    shape = ModelShape.from_name("llama-3-8b")
    frame, _ = import_profile(
        "aiconfigurator", PROFILE, shape, 1, GRID, pointwise_device="h100-sxm",
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


def aiconfigurator_ratios() -> dict[str, list[float]]:
    """Per regime, aiconfigurator's fp8/bf16 step-time ratios (same three variants)."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    def handle(weight: str, kv: str):
        return EngineHandle.compile(
            "meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "vllm", backend_version="0.24.0",
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
    variants = [times(handle(w, k)) for w, k in VARIANTS]
    return {name: [float(np.median(v[name] / base[name])) for v in variants] for name in AIC_POINTS}


VARIANTS = (("fp8", "bfloat16"), ("bfloat16", "fp8"), ("fp8", "fp8"))


def main() -> int:
    base = steps("bfloat16", "bfloat16")
    variants = {
        f"{w}/{k}": steps(w, k)
        for w, k in (("fp8", "bfloat16"), ("bfloat16", "fp8"), ("fp8", "fp8"))
    }
    print(f"{'regime (weights/KV vs bf16/bf16)':<38} " + " ".join(f"{v:>15}" for v in variants))
    for name, select in REGIMES.items():
        rows = select(base).to_numpy()
        cells = [
            np.median(f.ms.to_numpy()[rows] / base.ms.to_numpy()[rows]) for f in variants.values()
        ]
        print(f"{name:<38} " + " ".join(f"{c:>15.3f}" for c in cells))
    if "--aiconfigurator" in sys.argv[1:]:
        print("\naiconfigurator's own estimates (aiconfigurator-core 0.12.0):")
        for name, cells in aiconfigurator_ratios().items():
            print(f"{name:<38} " + " ".join(f"{c:>15.3f}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
