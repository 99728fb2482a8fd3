"""On a CUDA device: event timing and NVML's energy counter (skipped without CUDA)."""

import time

import numpy as np
import pytest
import torch

from servecal.profiler.design import Point
from servecal.profiler.energy import open_meter
from servecal.profiler.model import build_model
from servecal.profiler.runner import MeasureConfig, measure_block, point_batch
from servecal.profiler.shapes import ModelShape
from servecal.profiler.timing import CudaClock, LayerScale, timed_iteration

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def device():
    return torch.device("cuda", 0)


def test_cuda_event_timing_matches_the_wall_clock(device):
    shape = ModelShape.from_name("llama-3-8b")
    model = build_model(shape, device, n_layers=2)
    assert model.dtype == torch.bfloat16
    batch, tokens = point_batch(model, Point(32, 512, 2048, 1024))
    clock = CudaClock(device)
    for _ in range(3):
        timed_iteration(model, batch, tokens, clock)
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    segments = [timed_iteration(model, batch, tokens, clock) for _ in range(10)]
    wall_ms = (time.perf_counter() - t0) * 1e3 / 10
    events_ms = np.mean([sum(s) for s in segments])
    assert all(len(s) == 3 and min(s) > 0 for s in segments)
    # Events time the GPU work inside the wall-clock window (which adds launch and sync
    # overhead): never more than it. How much less depends on the host's load: not asserted.
    assert 0 < events_ms <= wall_ms * 1.05


def test_nvml_energy_counter_is_nonzero_and_increasing(device):
    meter, notice = open_meter(device)
    assert meter is not None, notice
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    readings = [meter.read_j()]
    for _ in range(3):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.3:
            a @ a
        torch.cuda.synchronize(device)
        readings.append(meter.read_j())
    assert all(b > a for a, b in zip(readings[:-1], readings[1:], strict=True)), readings
    state = meter.device_state()
    assert state["power_w"] and state["power_w"] > 0 and state["sm_clock_mhz"]


def test_points_get_energy_per_iteration(device):
    shape = ModelShape.from_name("llama-3-8b")
    model = build_model(shape, device, n_layers=2)
    meter, notice = open_meter(device)
    assert meter is not None, notice
    cfg = MeasureConfig(repeats=5, warmup=2, energy_window_s=0.3)
    rows = measure_block(
        model,
        [Point(64, 256, 1024, 0)],
        LayerScale(2, shape.n_layers),
        cfg,
        CudaClock(device),
        meter,
        np.random.default_rng(0),
    )[0]
    energy = rows[0]["energy_j"]
    power = rows[0]["power_w"]
    assert energy is not None and energy > 0
    # Joules per iteration ≈ power × time, within a generous factor (idle gaps, counter steps).
    assert 0.2 < energy / (power * rows[0]["ms"] / 1e3) < 5
