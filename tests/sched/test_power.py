"""The simulated power model: its shape, its fit from the copied public data, pricing runs."""

import json
import runpy
from pathlib import Path

import numpy as np
import pytest

from servecal.costmodels.errors import InputError
from servecal.sched import experiment as ex
from servecal.sched.experiment.models import OracleWarning
from servecal.sched.policies.registry import PolicySpec
from servecal.sched.power import (
    POWER_MODELS,
    PowerModel,
    PricedExecutor,
    Unpriced,
    load_power_model,
)
from servecal.sched.truth import AnalyticTruth

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
    shipped = json.loads(POWER_MODELS["a100-llama3-8b"].read_text())
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
    doc = json.loads(POWER_MODELS["a100-llama3-8b"].read_text())
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
