"""The simulated power model: its shape, its fit from the copied public data, pricing runs."""

import json
import runpy
from pathlib import Path

import numpy as np
import pytest

from servecal.sched import experiment as ex
from servecal.sched.experiment.models import OracleWarning
from servecal.sched.policies.registry import PolicySpec
from servecal.sched.power import (
    A100_LLAMA3_8B,
    POWER_MODELS,
    PowerModel,
    PricedExecutor,
    Unpriced,
    load_power_model,
)
from servecal.sched.truth import AnalyticTruth
from servecal.util.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def test_power_rises_from_decode_level_to_the_board_limit_with_the_rows():
    m = load_power_model("a100-llama3-8b")
    assert m.source == "model:a100-llama3-8b"
    decode = [m.power_w(n, 0) for n in (1, 8, 40, 100)]
    assert decode == [m.decode_w] * 4  # memory-bound decode: flat in the batch (Splitwise)
    rising = [m.power_w(40, c) for c in (0, 256, 512, 1024, 2048, 4096, 20000)]
    assert rising == sorted(rising) and rising[0] < rising[2] < rising[-1] == m.max_w
    assert m.idle_w < m.decode_w < m.power_w(0, 512) < m.max_w == 400.0
    assert m.iteration_j(40, 512, 10.0) == pytest.approx(m.power_w(40, 512) / 100.0)


def test_shipped_model_is_what_the_derivation_fits_from_the_copied_data():
    script = runpy.run_path(str(ROOT / "scripts" / "derive_power_model.py"), run_name="fit")
    shipped = json.loads(A100_LLAMA3_8B.read_text())
    assert "a100-llama3-8b" in POWER_MODELS
    assert script["build"]() == shipped
    fit = shipped["fit"]
    # the errors the docs quote, recomputed: prefill line over 44 Splitwise shapes,
    # decode level over ML.ENERGY's six vLLM Llama-3-8B runs
    assert fit["prefill"]["points"] == 44 and 0 < fit["prefill"]["rmse_w"] < 40
    assert fit["decode"]["points"] == 6 and 0 < fit["decode"]["rmse_w"] < 15
    assert 150 < shipped["parameters"]["decode_w"] < 260


class Fixed:
    """An executor with known durations and its own (to be dropped) energy."""

    energy_source = "samples"

    def __init__(self, ms):
        self.ms = ms

    def execute(self, n_decode, chunk, ctx, prefix, now_ms):
        return self.ms, 123.0


def test_priced_executor_charges_running_power_and_idle_gaps_and_drops_the_inner_energy():
    m = PowerModel("t", "test", 400.0, 50.0, 200.0, 400.0, intercept_w=-100.0, slope_w=50.0)
    ex_ = PricedExecutor(Fixed(10.0), m)
    assert ex_.energy_source == "model:t"
    ms, e = ex_.execute(40, 0, 100.0, 0.0, 0.0)
    assert (ms, e) == (10.0, pytest.approx(200.0 * 0.010))
    ms, e = ex_.execute(0, 1024, 0.0, 0.0, 30.0)  # 20 ms idle, then 10 ms at 400 W
    assert e == pytest.approx(50.0 * 0.020 + 400.0 * 0.010)
    _, e = ex_.execute(0, 128, 0.0, 0.0, 40.0)  # back to back: no idle; -100 + 50·7 = 250 W
    assert e == pytest.approx(250.0 * 0.010)
    assert Unpriced(Fixed(1.0)).execute(1, 0, 0.0, 0.0, 0.0) == (1.0, None)


def test_bad_power_models_are_one_line_errors(tmp_path):
    with pytest.raises(InputError, match="expected one of a100-llama3-8b"):
        load_power_model("h900")
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"schema": "servecal.power_model/1", "name": "x", "device": "d",
                               "parameters": {"tdp_w": 1}}))  # fmt: skip
    with pytest.raises(InputError, match="parameters.idle_w"):
        load_power_model(str(bad))
    doc = json.loads(A100_LLAMA3_8B.read_text())
    doc["parameters"]["idle_w"] = 900.0
    bad.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="idle_w <= decode_w"):
        load_power_model(str(bad) + "")  # a fresh spec: not the cached one


def _spec(**kw):
    return ex.RunSpec("mixed", PolicySpec("sloweave"), tpot_slo_ms=25.0, rate=20.0,
                      n_requests=80, **kw)  # fmt: skip


def test_runs_name_their_energy_source_and_power_none_switches_it_off():
    priced = ex.run(_spec(), 0)
    assert priced.energy_source == "model:a100-llama3-8b"
    e = priced.iterations["energy_j"].to_numpy()
    assert np.isfinite(e).all() and (e > 0).all()
    off = ex.run(_spec(power="none"), 0)
    assert off.energy_source == "none" and np.isnan(off.iterations["energy_j"]).all()
    # same seed, same times: pricing changes energy only
    assert np.array_equal(off.iterations["duration_ms"], priced.iterations["duration_ms"])


def test_power_prices_a_truth_that_has_no_energy_of_its_own():
    truth = AnalyticTruth()
    assert truth.energy_source == "none"
    spec = _spec(truth="analytic", predictor="oracle", power="a100-llama3-8b")
    with pytest.warns(OracleWarning):
        ex.check(spec)
    result = ex.run(spec, 0)
    assert result.energy_source == "model:a100-llama3-8b"
    assert np.isfinite(result.iterations["energy_j"]).all()
    with pytest.raises(InputError, match="--power"):
        ex.check(_spec(power="nope"))


def _metered_samples(model: PowerModel, rng: np.random.Generator):
    import pandas as pd

    rows = []
    for n in (1, 4, 16, 64):
        for c in (0, 128, 512, 2048, 4096):
            ms = 2.0 + 0.01 * n + 0.006 * c
            for rep in range(5):
                watts = model.power_w(n, c) * (1 + 0.01 * rng.standard_normal())
                rows.append((n, c, 512, 0, ms, watts * ms / 1000.0, rep))
    return pd.DataFrame(rows, columns=["n_decode", "chunk", "ctx", "prefix", "ms", "energy_j",
                                       "rep"])  # fmt: skip


def test_a_metered_calibration_recovers_the_power_model_it_was_drawn_from(tmp_path):
    from servecal.sched.power_fit import fit_power_doc

    truth = PowerModel("t", "d", 700.0, 80.0, 300.0, 700.0, intercept_w=-150.0, slope_w=70.0)
    frame = _metered_samples(truth, np.random.default_rng(0))
    doc = fit_power_doc(frame, "h-fit", "test GPU", 700.0, 80.0, "samples.parquet")
    p = doc["parameters"]
    assert p["decode_w"] == pytest.approx(300.0, rel=0.02)
    assert p["slope_w"] == pytest.approx(70.0, rel=0.05)
    assert p["intercept_w"] == pytest.approx(-150.0, abs=25.0)
    assert doc["fit"]["samples"]["rmse_w"] < 10.0  # the 1% noise drawn in
    path = tmp_path / "h.json"
    path.write_text(json.dumps(doc))
    fitted = load_power_model(str(path))
    assert fitted.source == "model:h-fit"
    assert fitted.power_w(40, 2048) == pytest.approx(truth.power_w(40, 2048), rel=0.03)
    with pytest.raises(InputError, match="no meter"):
        fit_power_doc(frame.assign(energy_j=np.nan), "x", "d", 700.0, 80.0, "s.parquet")


def test_the_fit_script_writes_a_loadable_model_or_one_error_line(tmp_path):
    import subprocess
    import sys

    from servecal.costmodels.samples import write_samples

    truth = PowerModel("t", "d", 400.0, 60.0, 200.0, 400.0, intercept_w=-100.0, slope_w=45.0)
    frame = _metered_samples(truth, np.random.default_rng(1))
    script = str(ROOT / "scripts" / "fit_power_from_samples.py")
    common = ["--name", "mine", "--device", "A100 here", "--max-w", "400", "--idle-w", "60"]
    write_samples(frame, tmp_path / "s.parquet", {"model": "t"})
    out = tmp_path / "p.json"
    done = subprocess.run([sys.executable, script, str(tmp_path / "s.parquet"), *common,
                           "--out", str(out)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert load_power_model(str(out)).source == "model:mine"
    write_samples(frame.assign(energy_j=np.nan), tmp_path / "none.parquet", {"model": "t"})
    bad = tmp_path / "bad.json"
    done = subprocess.run([sys.executable, script, str(tmp_path / "none.parquet"), *common,
                           "--out", str(bad)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and not bad.exists()
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")


def test_a_bad_power_model_name_on_the_device_truth_is_one_line():
    from servecal.sched.device_truth import device_truth

    with pytest.raises(InputError, match=r"--truth device:power=h900: power 'h900': expected"):
        device_truth("power=h900")
    assert device_truth("sigma=0,power=none").energy_source == "none"
