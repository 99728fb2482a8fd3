"""The plug-in's energy meters: NVML (faked pynvml), RAPL (a fake sysfs), unavailable, and
per-step energy from reads every few steps. No vLLM, no GPU."""

import math
import subprocess
import sys

import pytest

from servecal.integrations.vllm import energy
from servecal.integrations.vllm.energy import FakeMeter, StepEnergy, open_energy_meter


def _zone(root, name, uj, max_uj):
    z = root / name
    z.mkdir()
    (z / "energy_uj").write_text(f"{uj}\n")
    (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


class FakeNvml:
    """pynvml's surface the meter uses: counters in mJ per device handle."""

    class NVMLError(Exception):
        pass

    class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - pynvml's name
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801
        pass

    def __init__(self, counters_mj):
        self.counters_mj = counters_mj
        self.inits = 0

    def nvmlInit(self):  # noqa: N802 - pynvml's name
        self.inits += 1

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):  # noqa: N802
        return {"GPU-b": 1}[uuid]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # noqa: N802
        return self.counters_mj[handle]


@pytest.fixture
def nvml(monkeypatch):
    fake = FakeNvml({0: 1_000_000, 1: 5_000, 2: 7_000})
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_nvml_meter_reads_joules_since_it_opened(nvml):
    meter, notice = open_energy_meter()
    assert notice is None and meter.source == "nvml"
    nvml.counters_mj[0] += 2_500  # 2.5 J
    assert meter.read_j() == pytest.approx(2.5)


def test_tensor_parallel_gpus_are_summed_and_follow_cuda_visible_devices(nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1")
    meter, notice = open_energy_meter(gpus=[0, 1])  # logical 0, 1 = physical 2, 1
    assert notice is None and meter.source.startswith("nvml")
    nvml.counters_mj[2] += 1_000
    nvml.counters_mj[1] += 3_000
    nvml.counters_mj[0] += 99_000  # not one of the engine's GPUs
    assert meter.read_j() == pytest.approx(4.0)


def test_a_uuid_names_a_physical_gpu(nvml):
    meter, _ = open_energy_meter(prefer="nvml", gpus=["GPU-b"])
    nvml.counters_mj[1] += 1_500
    assert meter.read_j() == pytest.approx(1.5)


def test_no_driver_and_no_rapl_is_unavailable_never_zero(tmp_path, monkeypatch):
    fake = FakeNvml({})

    def no_library():
        raise FakeNvml.NVMLError_LibraryNotFound()

    fake.nvmlInit = no_library
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    meter, notice = open_energy_meter(rapl_root=str(tmp_path / "none"))
    assert meter is None
    assert notice == (
        "energy unavailable: NVML library not found (no NVIDIA driver); "
        f"no RAPL package zones under {tmp_path / 'none'}"
    )


def test_auto_falls_back_to_rapl_packages_across_a_wrap(tmp_path, monkeypatch):
    fake = FakeNvml({})

    def no_library():
        raise FakeNvml.NVMLError_LibraryNotFound()

    fake.nvmlInit = no_library
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    p0 = _zone(tmp_path, "intel-rapl:0", 999_000_000, 1_000_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 1, 10)  # a sub-zone of package 0: not counted twice
    meter, notice = open_energy_meter(rapl_root=str(tmp_path))
    assert notice is None and meter.source == "rapl"
    (p0 / "energy_uj").write_text("1500000\n")  # wrapped at 1000 J: +2.5 J
    assert meter.read_j() == pytest.approx(2.5)


def test_rapl_counter_files_stay_open_and_are_reread(tmp_path):
    from servecal.profiler.energy import RaplMeter

    z = _zone(tmp_path, "intel-rapl:0", 1_000_000, 10**12)
    meter = RaplMeter([str(z)])
    for uj in (3_000_000, 4_500_000):  # rewritten in place, as sysfs renders it afresh
        (z / "energy_uj").write_text(f"{uj}\n")
    assert meter.read_j() == pytest.approx(3.5)
    (z / "energy_uj").write_text("5500000\n")
    assert meter.read_j() == pytest.approx(4.5)
    meter.close()
    meter.close()  # idempotent


def test_prefer_rapl_does_not_touch_nvml(tmp_path, nvml):
    meter, notice = open_energy_meter(prefer="rapl", rapl_root=str(tmp_path))
    assert meter is None and "RAPL" in notice and "NVML" not in notice and nvml.inits == 0
    with pytest.raises(ValueError, match="energy meter must be one of"):
        open_energy_meter(prefer="zeus")


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_step_energy_shares_each_read_by_duration_and_sums_to_the_meter():
    clock = Clock()
    meter = FakeMeter(100.0, clock)  # 100 W
    steps = StepEnergy(meter, every=3)
    for d in (0.010, 0.030, 0.060, 0.020):
        clock.t += d + 0.001  # 1 ms of host time between steps: the meter counts it too
        steps.step(d)
    # one read so far (after step 3): 0.103 s · 100 W shared 1:3:6; the 4th is pending
    e = steps.energy_j
    assert e[:3] == pytest.approx([1.03, 3.09, 6.18]) and math.isnan(e[3])
    steps.close()
    steps.close()  # idempotent
    assert steps.energy_j[3] == pytest.approx(2.1)
    assert steps.total_j == pytest.approx(meter.read_j() - 0.0)
    assert steps.reads == 3 and steps.source == "fake"  # open, after step 3, at close


def test_reading_every_step_or_every_eight_gives_the_same_total():
    totals = []
    for every in (1, 8):
        clock = Clock()
        steps = StepEnergy(FakeMeter(250.0, clock), every=every)
        for i in range(37):
            clock.t += 0.004 + 0.001 * (i % 5)
            steps.step(0.004 + 0.001 * (i % 5))
        steps.close()
        totals.append((steps.total_j, steps.reads, len(steps.energy_j)))
    (t1, r1, n1), (t8, r8, n8) = totals
    assert t1 == pytest.approx(t8) and n1 == n8 == 37
    assert r1 == 38 and r8 == 1 + 5  # open + ceil(37 / 8)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        StepEnergy(FakeMeter(1.0), every=0)
    with pytest.raises(ValueError):
        FakeMeter(math.nan)


def test_the_meter_module_imports_neither_vllm_nor_torch():
    code = (
        "import sys, servecal.integrations.vllm.energy as e; "
        "print('vllm' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
    assert isinstance(FakeMeter(1.0), energy.EnergyMeter)
