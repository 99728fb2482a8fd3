"""Energy meters: RAPL wraparound, NVML without a driver, null energy and one notice."""

from pathlib import Path

import pytest
import torch

from servecal.profiler import energy
from servecal.profiler.design import Point
from servecal.profiler.model import build_model
from servecal.profiler.runner import MeasureConfig, measure_block
from servecal.profiler.shapes import ModelShape
from servecal.profiler.timing import CpuClock, LayerScale


def test_rapl_delta_handles_wraparound():
    assert energy.rapl_delta_uj(100, 350, 1000) == 250
    assert energy.rapl_delta_uj(900, 50, 1000) == 150  # wrapped once at 1000
    assert energy.rapl_delta_uj(5, 5, 1000) == 0


def _zone(root, name, uj, max_uj):
    z = root / name
    z.mkdir()
    (z / "energy_uj").write_text(f"{uj}\n")
    (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


def test_rapl_meter_sums_packages_across_a_wrap(tmp_path):
    p0 = _zone(tmp_path, "intel-rapl:0", 999_000_000, 1_000_000_000)
    _zone(tmp_path, "intel-rapl:1", 10_000_000, 1_000_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 1, 10)  # a sub-zone: part of package 0, not counted
    meter, notice = energy.open_meter(torch.device("cpu"), rapl_root=str(tmp_path))
    assert notice is None and meter.source == "rapl"
    (p0 / "energy_uj").write_text("2000000\n")  # wrapped: +3 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("12000000\n")  # +2 J
    assert meter.read_j() == pytest.approx(5.0)


def test_no_rapl_means_no_meter_and_a_reason(tmp_path):
    meter, notice = energy.open_meter(torch.device("cpu"), rapl_root=str(tmp_path / "none"))
    assert meter is None and "energy unavailable" in notice and "RAPL" in notice


def test_unreadable_rapl_says_why(tmp_path):
    z = _zone(tmp_path, "intel-rapl:0", 1, 10)
    (z / "energy_uj").unlink()
    meter, notice = energy.open_meter(torch.device("cpu"), rapl_root=str(tmp_path))
    assert meter is None and "cannot read RAPL counter" in notice


def test_nvml_without_driver_gives_no_meter_and_one_notice(monkeypatch):
    import pynvml

    def no_library():
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    meter, notice = energy.open_meter(torch.device("cuda", 0))
    assert meter is None
    assert notice == "energy unavailable: NVML library not found (no NVIDIA driver)"


def test_without_meter_rows_have_null_energy_never_zero():
    shape = ModelShape.from_name("tiny")
    model = build_model(shape, "cpu", n_layers=1)
    rows = measure_block(
        model,
        [Point(2, 8, 16, 0)],
        LayerScale(1, shape.n_layers),
        MeasureConfig(repeats=3, warmup=1),
        CpuClock(),
        None,
        __import__("numpy").random.default_rng(0),
    )[0]
    assert len(rows) == 3 and all(r["energy_j"] is None for r in rows)
    assert [r["rep"] for r in rows] == [0, 1, 2] and all(r["ms"] > 0 for r in rows)


class FakeMeter:
    """A counter at 50 W that moves only every 10 ms, like a coarse hardware counter."""

    source = "fake"

    def __init__(self):
        import time

        self._t0 = time.perf_counter()

    def read_j(self):
        import time

        return 50.0 * ((time.perf_counter() - self._t0) // 0.01) * 0.01

    def device_state(self):
        return {"power_w": 50.0, "sm_clock_mhz": None, "temp_c": None, "throttle": None}


def test_energy_is_read_over_a_group_long_enough_for_the_counter_to_move():
    import numpy as np

    shape = ModelShape.from_name("tiny")
    model = build_model(shape, "cpu", n_layers=1)
    cfg = MeasureConfig(repeats=2, warmup=0, energy_window_s=0.1)
    rows = measure_block(
        model, [Point(1, 0, 8, 0)], LayerScale(1, 1), cfg, CpuClock(), FakeMeter(),
        np.random.default_rng(0),
    )[0]  # fmt: skip
    # one iteration (a few ms) would not move a 10 ms counter: the >= 100 ms group does
    assert rows[0]["energy_j"] is not None and rows[0]["energy_j"] > 0


class TickClock:
    """A clock whose every mark advances a fake time by exactly 1 ms: the rows' times and
    the energy group's time are then the test's, not the loaded host's."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self._marks: list[float] = []

    def start(self) -> None:
        self._marks = [self.now_ms]

    def mark(self) -> None:
        self.now_ms += 1.0
        self._marks.append(self.now_ms)

    def stop(self) -> list[float]:
        self.mark()
        return [b - a for a, b in zip(self._marks[:-1], self._marks[1:], strict=True)]


class TickMeter(FakeMeter):
    """50 W of the :class:`TickClock`'s fake time."""

    def __init__(self, clock: TickClock) -> None:
        self.clock = clock

    def read_j(self):
        return 50.0 * self.clock.now_ms / 1e3


def test_energy_per_iteration_is_the_groups_energy_over_its_iterations():
    import numpy as np

    shape = ModelShape.from_name("tiny")
    model = build_model(shape, "cpu", n_layers=1)
    cfg = MeasureConfig(repeats=2, warmup=0, energy_window_s=0.1)
    clock = TickClock()
    rows = measure_block(
        model,
        [Point(1, 0, 8, 0)],
        LayerScale(1, 1),
        cfg,
        clock,
        TickMeter(clock),
        np.random.default_rng(0),
    )[0]
    e = rows[0]["energy_j"]
    # 50 W x one iteration's time, on a clock the test controls: the group (>= 100 ms of
    # wall time, hundreds of iterations) divided by the iterations it contained; what
    # must fail is reporting the whole group (ratio ~100s) or a counter that did not move
    # (None).
    ratio = e / (50.0 * rows[0]["ms"] / 1e3)
    assert ratio == pytest.approx(1.0, rel=1e-9), ratio
    assert e > 0 and rows[0]["power_w"] == 50.0


def test_one_place_opens_an_nvml_energy_meter():
    """calibrate, the torch executor and the vLLM plug-in's run log all open their NVML
    meters through ``profiler.energy.open_nvml``."""
    root = Path(__file__).resolve().parents[2]
    openers = [
        path.relative_to(root).as_posix()
        for folder in ("costmodels", "sched", "profiler", "integrations", "reports", "servecal")
        for path in (root / folder).rglob("*.py")
        if "NvmlMeter(" in path.read_text()
    ]
    assert openers == ["profiler/energy.py"]
