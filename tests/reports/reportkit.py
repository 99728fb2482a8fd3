"""Small synthetic runs and calibrations for the report tests (built in ms, not minutes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from servecal.costmodels.analytic import AnalyticPredictor
from servecal.reports.loading import CalibrationData
from servecal.sched.metrics import summarize

SIGMA = 0.05


def calibration(rng: np.random.Generator, repeats: int = 12) -> CalibrationData:
    """Samples from a log-normal truth on a small grid, with the exact quantile predictor."""
    truth = AnalyticPredictor(sigma=SIGMA)
    rows = []
    for n in (0, 1, 4, 16, 64):
        for c in (0, 64, 256, 1024):
            if n + c == 0:
                continue
            median = truth.predict(n, c)
            ms = median * np.exp(SIGMA * rng.standard_normal(repeats))
            for rep, t in enumerate(ms):
                rows.append((n, c, 512, 0, float(t), 0.05 * float(t), rep))
    samples = pd.DataFrame(
        rows, columns=["n_decode", "chunk", "ctx", "prefix", "ms", "energy_j", "rep"]
    )
    return CalibrationData(
        path=Path("synthetic-calibration"),
        samples=samples,
        predictor=truth,
        fingerprint={"device_name": "synthetic CPU", "model": "tiny", "dtype": "float32"},
        table_json={"domain": {"n_decode": [0, 16], "chunk": [0, 1024]}},
    )


def _requests(rng: np.random.Generator, n: int, tpot_slo: float, quality: float) -> pd.DataFrame:
    arrival = np.sort(rng.uniform(0, 20_000, n))
    prompt = rng.integers(32, 2048, n)
    out = rng.integers(2, 200, n)
    ttft = rng.gamma(2.0, 150.0 / quality, n)
    tpot = tpot_slo * rng.uniform(0.5, 1.0 + 0.6 / quality, n)
    first = arrival + ttft
    return pd.DataFrame(
        {
            "rid": np.arange(n),
            "arrival_ms": arrival,
            "prompt_tokens": prompt,
            "output_tokens": out,
            "ttft_slo_ms": np.full(n, 1000.0),
            "tpot_slo_ms": np.full(n, tpot_slo),
            "slo_class": ["default"] * n,
            "first_token_ms": first,
            "completion_ms": first + tpot * 0.8 * out,
            "tokens_out": out,
            "tpot_p99_ms": tpot,
            "tpot_mean_ms": tpot * 0.8,
            "tpot_max_ms": tpot * 1.1,
            "recomputes": rng.integers(0, 2, n) * (quality < 1),
            "parks": np.zeros(n, dtype=int),
            "slo_exception": rng.random(n) < 0.02,
        }
    )


def _iterations(
    rng: np.random.Generator, n: int, tpot_slo: float, energy: bool, drift: bool
) -> pd.DataFrame:
    pred = AnalyticPredictor()
    n_decode = rng.integers(0, 40, n)
    chunk = rng.integers(0, 1500, n)
    p50 = np.asarray(pred.predict(n_decode, chunk), dtype=float)
    slow = np.where(np.arange(n) > n // 2, 1.15, 1.0) if drift else 1.0
    actual = p50 * slow * np.exp(0.05 * rng.standard_normal(n))
    frame = pd.DataFrame(
        {
            "start_ms": np.cumsum(actual) - actual,
            "duration_ms": actual,
            "n_decode": n_decode,
            "chunk": chunk,
            "ctx": rng.integers(0, 2000, n),
            "prefix": np.zeros(n, dtype=int),
            "pred_p50_ms": p50,
            "pred_p99_ms": p50 * 1.12,
            "margin_ms": np.full(n, 0.2),
            "energy_j": 0.3 * actual if energy else np.full(n, np.nan),
            "decision_us": rng.uniform(2, 8, n),
            "budget_ms": np.where(n_decode > 0, rng.uniform(0, tpot_slo, n), np.inf),
        }
    )
    if drift:
        state = np.array(["ok"] * n, dtype=object)
        state[int(n * 0.55) :] = "warn"
        state[int(n * 0.6) :] = "drift"
        frame["drift_state"] = state
    return frame


def write_run(
    folder: Path,
    rng: np.random.Generator,
    policy: str,
    workload: str,
    tpot_slo: float,
    seed: int,
    energy_source: str = "rapl",
    drift: bool = False,
    quality: float = 1.0,
    config: dict | None = None,
    search: dict | None = None,
) -> Path:
    """A run folder in the docs/engine.md layout, with its summary from the metrics module;
    ``config`` adds to its config (truth, predictor, rate, …), ``search`` is written as
    its max-goodput search (``goodput_search``)."""
    folder.mkdir(parents=True, exist_ok=True)
    requests = _requests(rng, 60, tpot_slo, quality)
    iterations = _iterations(rng, 400, tpot_slo, energy_source != "unavailable", drift)
    requests.to_parquet(folder / "requests.parquet")
    iterations.to_parquet(folder / "iterations.parquet")
    info = {
        "config": {"policy": policy, "workload": workload, "tpot_slo_ms": tpot_slo, "seed": seed,
                   **(config or {})},
        "summary": summarize(requests, iterations),
        "energy_source": energy_source,
    }  # fmt: skip
    if search is not None:
        info["goodput_search"] = search
    if drift:
        info["drift"] = {"state": "drift", "recommendation": "recalibrate n_decode 16-64"}
    (folder / "run.json").write_text(json.dumps(info))
    return folder


def write_grid(root: Path, rng: np.random.Generator, seeds: int = 2) -> Path:
    """A small compare-like tree: 2 workloads × 3 policies × 2 targets × seeds."""
    quality = {"fixed-256": 0.8, "full": 0.5, "sloweave": 1.3}
    for tpot in (10.0, 25.0):
        for workload in ("mixed", "long"):
            for policy, q in quality.items():
                for seed in range(seeds):
                    write_run(
                        root / f"{workload}-{policy}-{tpot:g}-{seed}", rng, policy, workload,
                        tpot, seed, drift=(policy == "sloweave" and seed == 0), quality=q,
                    )  # fmt: skip
    return root


def search(capacity: float, rates: tuple[float, ...] = (10.0, 20.0, 40.0, 80.0)) -> dict:
    """A max-goodput search as the sweep writes it, over an attainment curve that
    crosses 90% at ``capacity`` req/s (probes at ``rates`` and bisected to 2%)."""
    probes, good, bad = [], 0.0, None
    for rate in rates:
        att = 0.9 ** ((rate / capacity) ** 4)
        probes.append(
            {
                "rate": rate,
                "attainment": att,
                "tpot_attainment": min(1.0, att + 0.05),
                "goodput": rate * att,
                "p99_ttft_ms": 100.0,
                "p99_tpot_ms": 20.0,
            }
        )
        if att >= 0.9:
            good = max(good, rate)
        else:
            bad = rate if bad is None else min(bad, rate)
    while bad is not None and bad - good > 0.02 * bad:
        mid = (good + bad) / 2
        att = 0.9 ** ((mid / capacity) ** 4)
        probes.append(
            {
                "rate": mid,
                "attainment": att,
                "tpot_attainment": att,
                "goodput": mid * att,
                "p99_ttft_ms": 100.0,
                "p99_tpot_ms": 20.0,
            }
        )
        good, bad = (mid, bad) if att >= 0.9 else (good, mid)
    return {"target": 0.9, "bracket": {"lo": rates[0], "hi": rates[-1], "rel_tol": 0.02},
            "max_goodput": good, "bound": "measured", "probes": probes}  # fmt: skip
