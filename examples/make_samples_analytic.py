"""Regenerate ``examples/samples_analytic.parquet`` (docs/costtable.md's example).

Samples from a known truth (the docs/spec.md §1 formula with log-normal noise σ = 0.05 and
0.3% spikes of 2×) on a 12 × 17 grid with 20 repeats per point:

    python examples/make_samples_analytic.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servecal import __version__
from servecal.costmodels.samples import write_samples
from servecal.costmodels.synthetic import SyntheticTruth, grid_points

N_DECODE = [0, 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128]
CHUNK = [0, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1280, 1536, 2048, 2560, 3072, 4096]


def main() -> None:
    truth = SyntheticTruth()
    frame = truth.draw(grid_points(N_DECODE, CHUNK), repeats=20, rng=np.random.default_rng(2026))
    provenance = {
        "device_name": "synthetic",
        "truth": "docs/spec.md §1 formula, lognormal sigma=0.05, spikes 0.3% x2, 300 W",
        "model": "analytic",
        "servecal_version": __version__,
    }
    out = Path(__file__).with_name("samples_analytic.parquet")
    write_samples(frame, out, provenance)
    print(f"wrote {len(frame)} rows to {out}")


if __name__ == "__main__":
    main()
