"""What pricing the pointwise kernels changes: composed decode steps before and after.

1. Decode-only steps of eager engines (Sarathi-Serve figure 2 / table 2, Yi-34B TP 2 on
   A100 PCIe, and Splitwise token_time, Llama-2-70B TP 2/4/8 on A100; a CUDA-graph
   engine's, vLLM V1 on H100, are in benchmarks/modern_decode.py): median error of the GPU-only
   composed time, and of the held-out host-overhead model (benchmarks/eager_overhead.py's
   split), without and with the pointwise kernels priced.
2. The pointwise model itself against measured kernels: Vidur's A100 Llama-3-8B
   per-layer pointwise op times (norms, rope, activation, add; TP 1-2, 1-96 tokens)
   beside the model's price for the same layer.

    python benchmarks/pointwise_kernels.py         # ~10 s
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from servecal.profiler.importers.aiconfigurator import AiConfiguratorSource
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.holdout import gpu_ms, holdout
from servecal.profiler.importers.interp import ExtrapolationLog
from servecal.profiler.importers.pointwise import KERNELS_PER_LAYER, LAUNCH_MS, PointwiseModel
from servecal.profiler.importers.published import sarathi_steps, splitwise_steps
from servecal.profiler.shapes import ModelShape

ROOT = Path(__file__).resolve().parents[1] / "tests" / "data"
EAGER = ROOT / "eager"
VIDUR_OPS = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")


def composed(shape: ModelShape, steps: pd.DataFrame, pointwise: bool, device: str | None):
    out = np.zeros((len(steps), 2))
    tps = steps["tp"] if "tp" in steps else pd.Series(2, index=steps.index)
    for tp in sorted(tps.unique()):
        rows = (tps == tp).to_numpy()
        source = AiConfiguratorSource(
            EAGER / "aiconfigurator_a100",
            shape,
            int(tp),
            ExtrapolationLog(),
            CommOptions(),
            pointwise,
            device,
        )
        out[rows] = gpu_ms(source, shape, steps[rows])
    return out


def decode_steps() -> None:
    yi = ModelShape.resolve(str(EAGER / "yi-34b.json"))
    llama = ModelShape.resolve(str(EAGER / "llama-2-70b.json"))
    sarathi = sarathi_steps(EAGER)
    sarathi = sarathi[sarathi["chunk"] == 0].reset_index(drop=True)
    split = splitwise_steps(EAGER / "splitwise_llama2-70b_a100.csv", "llama2-70b", "a100-80gb")
    print("1. decode-only steps: median error, pointwise kernels at 0 -> priced")
    print(f"   {'data':<34} {'GPU only':>18} {'+ overhead, held out':>24}")
    for name, shape, steps, device, fit_scale in (
        ("Sarathi decode (Yi-34B TP2, PCIe)", yi, sarathi, "a100-pcie-80gb", True),
        ("Splitwise token_time (70B TP2-8)", llama, split, None, False),
    ):
        cells = []
        for pointwise in (False, True):
            gpu = composed(shape, steps, pointwise, device)
            gpu_error = np.median(np.abs(gpu[:, 0] / steps["ms"].to_numpy() - 1))
            results = holdout(steps, gpu, fit_scale)
            held = np.mean([r.median(False) for r in results])
            cells.append((gpu_error, held))
        (g0, h0), (g1, h1) = cells
        print(
            f"   {name:<34} {100 * g0:7.1f}% -> {100 * g1:5.1f}%"
            f"      {100 * h0:7.1f}% -> {100 * h1:5.1f}%"
        )


def vidur_kernels() -> None:
    shape = ModelShape.from_name("llama-3-8b")
    frame = pd.read_csv(ROOT / "profiler" / "vidur" / "llama3_8b_mlp.csv")
    measured = sum(frame[f"time_stats.{op}.median"] for op in VIDUR_OPS)
    print(
        f"\n2. per-layer pointwise time, Llama-3-8B on A100 (model: {KERNELS_PER_LAYER} "
        f"kernels x {1000 * LAUNCH_MS:.0f} us + bytes / 2,039 GB/s)"
    )
    print(f"   {'TP':>3} {'tokens':>7} {'Vidur measured (us)':>20} {'model (us)':>11}")
    ratios = []
    for (tp, tokens), value in zip(
        frame[["num_tensor_parallel_workers", "num_tokens"]].itertuples(index=False),
        measured,
        strict=True,
    ):
        model = PointwiseModel(shape, int(tp), "a100-sxm-80gb").layer_ms(int(tokens))
        ratios.append(model / value)
        if tokens in (1, 8, 32, 96):
            print(f"   {tp:>3} {tokens:>7} {1000 * value:>20.1f} {1000 * model:>11.1f}")
    print(f"   model / measured over {len(ratios)} rows: median {np.median(ratios):.2f}")


def main() -> int:
    decode_steps()
    vidur_kernels()
    return 0


if __name__ == "__main__":
    sys.exit(main())
