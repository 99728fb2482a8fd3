"""Composed tables + a host-overhead model against eager engines' published steps.

Sarathi-Serve (Yi-34B TP 2, A100 PCIe: figure 2 decode and prefill, table 2) and
Splitwise (Llama-2-70B TP 2/4/8, A100: ``token_time``), composed from aiconfigurator's
A100-SXM vLLM 0.14 tables with the pointwise kernels priced. The overhead model
``step = max(s·other + a·attention, floor) + c0 + c1·n`` is fitted on half of the configurations and
tested on the other half, both ways round; prints the GPU-only error, then the fitted
model's median error on the half it was fitted on and on the held-out half.
Splitwise ran on the profile's device class (A100 SXM), so its scales are fixed at 1;
Sarathi's A100 PCIe and 2024 kernels get fitted ``s`` and ``a``.

    python benchmarks/eager_overhead.py            # ~10 s
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from servecal.profiler.importers.aiconfigurator import AiConfiguratorSource
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.holdout import HalfResult, gpu_ms, holdout
from servecal.profiler.importers.interp import ExtrapolationLog
from servecal.profiler.importers.published import sarathi_steps, splitwise_steps
from servecal.profiler.shapes import ModelShape

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "eager"
PROFILE = DATA / "aiconfigurator_a100"


def source(shape: ModelShape, tp: int, pointwise_device: str | None = None) -> AiConfiguratorSource:
    return AiConfiguratorSource(
        PROFILE, shape, tp, ExtrapolationLog(), CommOptions(), True, pointwise_device
    )


def sarathi() -> tuple:
    shape = ModelShape.resolve(str(DATA / "yi-34b.json"))
    steps = sarathi_steps(DATA)
    gpu = gpu_ms(source(shape, 2, "a100-pcie-80gb"), shape, steps)
    return steps, gpu, holdout(steps, gpu, fit_scale=True)


def splitwise() -> tuple:
    shape = ModelShape.resolve(str(DATA / "llama-2-70b.json"))
    steps = splitwise_steps(DATA / "splitwise_llama2-70b_a100.csv", "llama2-70b", "a100-80gb")
    gpu = np.zeros((len(steps), 2))
    for tp in sorted(steps["tp"].unique()):
        rows = (steps["tp"] == tp).to_numpy()
        gpu[rows] = gpu_ms(source(shape, int(tp)), shape, steps[rows])
    return steps, gpu, holdout(steps, gpu, fit_scale=False)


def report(name: str, results: list[HalfResult]) -> None:
    sets = sorted(results[0].errors["set"].unique())
    print(f"\n{name}")
    print(
        f"  {'set':<16} {'GPU only':>9}  "
        + "  ".join(f"fit{r.fit_half}: fit / held-out" for r in results)
    )
    for s in [*sets, None]:
        label = s or "all"
        rows = results[0].errors if s is None else results[0].errors[results[0].errors["set"] == s]
        cells = "  ".join(
            f"{100 * r.median(True, s):8.1f}% / {100 * r.median(False, s):5.1f}%" for r in results
        )
        print(f"  {label:<16} {100 * rows['gpu_error'].median():8.1f}%  {cells}")
    for r in results:
        m = r.model
        print(
            f"  fitted on half {r.fit_half}: floor {m.floor_ms:.2f} ms, c0 {m.c0_ms:.2f} ms, "
            f"c1 {m.c1_ms:.3f} ms/request, GPU x{m.gpu_scale:.2f}, "
            f"attention x{m.attention_scale:.1f}"
        )


def main() -> int:
    for name, run in (
        ("Sarathi-Serve, Yi-34B TP2, A100 PCIe (figure 2 + table 2)", sarathi),
        ("Splitwise token_time, Llama-2-70B TP2/4/8, A100", splitwise),
    ):
        steps, _, results = run()
        report(f"{name}: {len(steps)} configurations", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
