"""Decode steps of a CUDA-graph engine, composed with the pointwise kernels at 0 and priced.

vLLM 0.12 (V1: CUDA graphs, chunked prefill) serving Qwen/Qwen3-32B (bf16) on H100 SXM at
TP 2/4/8, measured by aiconfigurator (``systems/silicon_sample.csv``; the copy and its
provenance: ``tests/data/modern/README.md``). Each osl-1024 row's TPOT is one decode step
of ``batch_size`` requests at the mean context ``isl + 512``; the decode-dominated rows
are those whose prefill interference, bounded from the measurements, is <= 5%
(``profiler/importers/silicon.py``). Composed from aiconfigurator's H100 SXM vLLM 0.14
operator tables with the graph all-reduce (``--comm-backend vllm-v1``), without
(``--no-pointwise``) and with the pointwise kernels priced (``--pointwise-device
h100-sxm``: per-kernel launch cost + bytes over the datasheet HBM bandwidth).

    python benchmarks/modern_decode.py         # ~5 s
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from servecal.profiler.importers.aiconfigurator import AiConfiguratorSource
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.interp import ExtrapolationLog
from servecal.profiler.importers.pointwise import KERNELS_PER_LAYER, LAUNCH_MS, PointwiseModel
from servecal.profiler.importers.silicon import (
    MAX_INTERFERENCE,
    composed_decode_ms,
    error_and_bias,
    silicon_decode_steps,
)
from servecal.profiler.shapes import ModelShape

MODERN = Path(__file__).resolve().parents[1] / "tests" / "data" / "modern"
MEASURED = MODERN / "aiconfigurator_silicon_qwen3-32b_h100_vllm0.12.csv"
PROFILE = MODERN / "aiconfigurator_h100_qwen3_32b"
SHAPE = MODERN / "qwen3-32b.json"


def composed(pointwise: bool):
    """Composed decode times of every osl-1024 step, and the extrapolated reads."""
    shape = ModelShape.resolve(str(SHAPE))
    steps = silicon_decode_steps(MEASURED)
    log = ExtrapolationLog()
    sources = {
        tp: AiConfiguratorSource(PROFILE, shape, tp, log, CommOptions("vllm-v1"), pointwise)
        for tp in sorted(steps["tp"].unique())
    }
    return steps, composed_decode_ms(sources, shape, steps), log.count, sources


def main() -> int:
    steps, bare, bare_out, _ = composed(False)
    _, priced, priced_out, sources = composed(True)
    model: PointwiseModel = next(iter(sources.values())).pointwise
    shape = ModelShape.resolve(str(SHAPE))
    print(
        f"pointwise kernels: {KERNELS_PER_LAYER} per layer x {1000 * LAUNCH_MS:.0f} us launch"
        f" + bytes / {model.bandwidth_gbps:,.0f} GB/s ({model.device}); comm: vllm-v1 (graph)"
    )
    print(f"reads beyond the profiled grid: {bare_out} (at 0), {priced_out} (priced)\n")
    measured = steps["ms"].to_numpy()
    dominated = steps["decode_dominated"].to_numpy()
    print(f"{'decode steps':<44} {'median error':>18} {'bias':>16}")
    print(f"{'':<44} {'at 0 -> priced':>18} {'at 0 -> priced':>16}")
    # TPOT(osl) = D + P/osl makes D = TPOT(osl) - (TPOT(osl/2) - TPOT(osl)): the decode
    # step with the measured interference taken out, to check the result does not hang on it
    less_bound = measured * (1 - steps["interference"].fillna(0).to_numpy())
    for name, rows, truth in (
        (f"decode-dominated (interference <= {MAX_INTERFERENCE:.0%}), n={dominated.sum()}",
         dominated, measured),
        ("  the same, TPOT less its bound", dominated, less_bound),
        (f"all osl-1024 rows, n={len(steps)}", np.ones(len(steps), bool), measured),
    ):  # fmt: skip
        e0, b0 = error_and_bias(bare[rows, 0], truth[rows])
        e1, b1 = error_and_bias(priced[rows, 0], truth[rows])
        print(f"{name:<44} {100 * e0:7.1f}% -> {100 * e1:5.1f}% {b0:8.2f} -> {b1:5.2f}")
    print(
        f"\n{'TP':>3} {'isl':>5} {'c':>4} {'bound':>6} {'measured':>9} {'at 0':>7} "
        f"{'priced':>7} {'pointwise':>10} {'left/layer':>11}"
    )
    for i in np.flatnonzero(dominated):
        r = steps.iloc[i]
        left = 1000 * (r.ms - priced[i, 0]) / shape.n_layers
        print(
            f"{r.tp:>3} {r.ctx - 512:>5} {r.n_decode:>4} {100 * r.interference:5.1f}% "
            f"{r.ms:>7.2f}ms {bare[i, 0]:>7.2f} {priced[i, 0]:>7.2f} {priced[i, 1]:>9.2f} "
            f"{left:>8.1f} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
