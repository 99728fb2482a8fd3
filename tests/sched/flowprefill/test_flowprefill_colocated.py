"""Colocated setting: decodes keep their TPOT between operators; engine baselines."""

from __future__ import annotations

import numpy as np
import pytest
from flowkit import driver, req

from servecal.costmodels import AnalyticPredictor
from servecal.sched.engine import Engine, EngineConfig
from servecal.sched.experiment import RunSpec, choose_backend, run
from servecal.sched.flowprefill import FlowPrefill, TokenBudgetChunks
from servecal.sched.policies import ENGINE, PolicySpec, TokenBudget, make_policy
from servecal.sched.truth import AnalyticTruth


def test_decodes_meet_their_tpot_while_a_long_prefill_runs():
    # 0 decodes 200 tokens with a 20 ms TBT while a 12k-token prompt (≈ 73 ms) prefills
    reqs = [req(0, 0.0, 100, 1e4, out=200, tpot=20.0), req(1, 5.0, 12_000, 1e4, out=2)]
    flow = driver(reqs, FlowPrefill(), setting="colocated").run()
    frame = flow.requests.set_index("rid")
    assert frame.loc[0, "tpot_max_ms"] <= 20.0  # never waited a whole prefill
    assert frame.loc[0, "tokens_out"] == 200 and frame.loc[1, "tokens_out"] == 2
    it = flow.iterations
    long = it[it["rids"] == "1"]
    decodes_inside = it[(it["chunk"] == 0) & (it["start_ms"] > long["start_ms"].min())
                        & (it["start_ms"] < frame.loc[1, "first_token_ms"])]  # fmt: skip
    assert len(decodes_inside) >= 3  # decode iterations slotted between its operators
    # the prefill's operators still add up to its whole cost
    assert long["duration_ms"].sum() == pytest.approx(AnalyticPredictor().predict(0, 12_000))


def test_edf_token_budget_on_the_engine_prefills_the_earliest_deadline_first():
    reqs = [req(0, 0.0, 3000, 10_000.0, out=2), req(1, 0.0, 400, 100.0, out=2)]
    engine = Engine(reqs, TokenBudget(512, order="edf"), AnalyticPredictor(),
                    AnalyticTruth().executor(np.random.default_rng(0)), EngineConfig())  # fmt: skip
    frame = engine.run().requests.set_index("rid")
    assert frame.loc[1, "first_token_ms"] < frame.loc[0, "first_token_ms"]
    with pytest.raises(ValueError):
        TokenBudget(0, order="edf")


def test_colocated_baselines_run_on_the_engine():
    assert type(make_policy("fcfs")).__name__ == "FullPrefill"
    assert make_policy("fcfs-chunk-512") == TokenBudget(512, order="fcfs")
    assert make_policy("edf-chunk-512") == TokenBudget(512, order="edf")
    assert make_policy("edf-chunk-512", "operator-driver") == TokenBudgetChunks(512, "edf")
    for name in ("fcfs", "fcfs-chunk-512", "edf-chunk-512", "sloweave"):
        assert choose_backend(PolicySpec(name), "colocated") == ENGINE
        assert choose_backend(PolicySpec("flowprefill"), "colocated") == "operator-driver"
    spec = RunSpec("multislo", PolicySpec("sloweave"), rate=20.0, n_requests=60)
    result = run(spec, 0)
    assert (
        result.plan_calls > 0 and result.parks == 0 and set(result.counters) <= {"beyond_grid"}
    )  # engine run


def test_fitted_truth_recovers_the_formula_and_runs(tmp_path):
    from servecal.sched.fitted_truth import fit_formula

    true = AnalyticPredictor(0.5, 1.0, 0.2, 2.0, 0.06)
    n = np.array([0, 0, 0, 8, 64, 256, 8, 64])
    c = np.array([128, 1024, 4096, 0, 0, 0, 512, 2048])
    fit = fit_formula(n, c, np.array([true.predict(a, b) for a, b in zip(n, c, strict=True)]))
    for a, b in ((0, 3000), (32, 0), (16, 700)):
        assert fit.predict(a, b) == pytest.approx(true.predict(a, b), rel=1e-6)
    samples = tmp_path / "s.csv"
    rows = "".join(f"{a},{b},0,0,{true.predict(a, b)},,0\n" for a, b in zip(n, c, strict=True))
    samples.write_text("n_decode,chunk,ctx,prefix,ms,energy_j,rep\n" + rows)
    spec = RunSpec(
        "multislo", PolicySpec("flowprefill"), rate=5.0, n_requests=30, truth=f"fit:{samples}",
        predictor="oracle", backend="operator-driver", setting="prefill",
    )  # fmt: skip
    it = run(spec, 0).iterations
    whole = it[(it["ops_from"] == 0) & ~it["parked"]]  # prefills run in one piece
    assert len(whole) > 10
    expected = [true.predict(0, int(x)) for x in whole["chunk"]]
    assert whole["duration_ms"].to_numpy() == pytest.approx(expected)
