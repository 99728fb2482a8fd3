"""Composed tables against a CUDA-graph engine's decode steps (vLLM 0.12, Qwen3-32B, H100)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from servecal.profiler.importers.aiconfigurator import AiConfiguratorSource
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.interp import ExtrapolationLog
from servecal.profiler.importers.silicon import (
    composed_decode_ms,
    error_and_bias,
    silicon_decode_steps,
)
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

MODERN = Path(__file__).parents[1] / "data" / "modern"
MEASURED = MODERN / "aiconfigurator_silicon_qwen3-32b_h100_vllm0.12.csv"
PROFILE = MODERN / "aiconfigurator_h100_qwen3_32b"
SHAPE = ModelShape.resolve(str(MODERN / "qwen3-32b.json"))


def composed(steps: pd.DataFrame, pointwise: bool) -> np.ndarray:
    sources = {
        tp: AiConfiguratorSource(
            PROFILE, SHAPE, tp, ExtrapolationLog(), CommOptions("vllm-v1"), pointwise
        )
        for tp in (2, 4, 8)
    }
    return composed_decode_ms(sources, SHAPE, steps)


def test_silicon_rows_become_decode_steps_at_the_mean_context_with_a_measured_bound():
    steps = silicon_decode_steps(MEASURED)
    assert len(steps) == 30 and set(steps.tp) == {2, 4, 8}
    assert set(steps.ctx) == {1024 + 512, 4096 + 512} and (steps.chunk == 0).all()
    first = steps[(steps.tp == 2) & (steps.ctx == 1536) & (steps.n_decode == 8)].iloc[0]
    # TPOT 15.901 ms at osl 1024, 16.478 ms at osl 512 (same isl, concurrency, TP)
    assert first.ms == pytest.approx(15.900537, abs=1e-5)
    assert first.interference == pytest.approx(16.478267 / 15.900537 - 1)
    dominated = steps[steps.decode_dominated]
    assert len(dominated) == 11 and dominated.n_decode.max() == 32
    assert (dominated.interference <= 0.05).all()


def test_pricing_the_pointwise_kernels_lowers_the_median_decode_error():
    steps = silicon_decode_steps(MEASURED)
    rows = steps.decode_dominated.to_numpy()
    measured = steps.ms.to_numpy()
    bare, priced = composed(steps, False), composed(steps, True)
    assert (bare[:, 1] == 0).all()
    per_layer_us = 1000 * priced[rows, 1] / SHAPE.n_layers
    assert ((per_layer_us > 24) & (per_layer_us < 28)).all()  # 5 x 5 us + bytes / 3,350 GB/s
    e0, b0 = error_and_bias(bare[rows, 0], measured[rows])
    e1, b1 = error_and_bias(priced[rows, 0], measured[rows])
    assert e0 > 0.2 and e1 < 0.6 * e0 and e1 < 0.15
    assert b0 < b1 < 1.0  # closer, still low: the priced kernels do not overshoot
    all_e0, _ = error_and_bias(bare[:, 0], measured)
    all_e1, _ = error_and_bias(priced[:, 0], measured)
    assert all_e1 < all_e0


def test_silicon_file_of_two_models_or_without_the_half_length_runs_is_refused(tmp_path):
    frame = pd.read_csv(MEASURED)
    mixed = frame.copy()
    mixed.loc[0, "model_path"] = "other/model"
    mixed.to_csv(tmp_path / "mixed.csv", index=False)
    with pytest.raises(InputError, match="one backend, model and system"):
        silicon_decode_steps(tmp_path / "mixed.csv")
    frame[frame.osl != 512].to_csv(tmp_path / "short.csv", index=False)
    with pytest.raises(InputError, match="osl 1024 and 512"):
        silicon_decode_steps(tmp_path / "short.csv")
