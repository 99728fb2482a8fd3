"""The audit's partial drift, on data the test controls: a CPU-sized calibration
(chunks 16-128, 20 repeats per grid point at a few percent noise) whose rows with
chunk >= 64 (40% of them) run 15% slower, validated against its own table.

Every point of the upper half of the chunk axis lies in the same fixed band as the
lower half (``chunk 1-255``): counting points across the grid or the band dilutes
the drift. Each point's 20 repeats reject alone, so the gate says ``drifted``
(exit 1) and finds the region from the points: chunk 64-128. Unchanged, the same
calibration is ``valid`` (exit 0). Samples are drawn, never timed.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.drift.gate import decide
from servecal.costmodels.samples import write_samples
from servecal.costmodels.synthetic import SyntheticTruth, grid_points

runner = CliRunner()
#: A CPU ``tiny`` calibration's shape: chunks 16-128 beside decode-only points.
AXES = {"n_decode": [0, 1, 2, 4, 8, 16], "chunk": [0, 16, 32, 64, 128],
        "ctx": [16, 64, 128, 256], "prefix": [0, 32]}  # fmt: skip
TRUTH = SyntheticTruth(decode_attention=2e-5, prefill_attention=1e-6, sigma=0.03)
PROV = {"device_name": "synthetic-cpu", "model": "tiny", "model_hash": "t1"}
REPEATS = 20


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from servecal.costmodels.fit import fit_cost_table

    root = tmp_path_factory.mktemp("partial")
    points = grid_points(AXES["n_decode"], AXES["chunk"], AXES["ctx"], AXES["prefix"])
    points = points[(points["n_decode"] > 0) | (points["chunk"] > 0)]  # an iteration does work
    frame = TRUTH.draw(points, REPEATS, np.random.default_rng(38))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_cost_table(frame, PROV, seed=0).table.save(root / "table.json")
    upper = frame["chunk"] >= 64
    slowed = frame.assign(ms=np.where(upper, frame["ms"] * 1.15, frame["ms"]))
    write_samples(frame, root / "same.parquet", PROV)
    (root / "slow").mkdir()
    write_samples(slowed, root / "slow" / "samples.parquet", PROV)
    share = float(upper.mean())
    return {"table": root / "table.json", "same": root / "same.parquet",
            "slow": root / "slow" / "samples.parquet", "upper_share": share}  # fmt: skip


def _validate(files: dict, which: str) -> tuple[int, dict]:
    r = runner.invoke(app, ["validate", str(files["table"]), str(files[which]), "--json"])
    return r.exit_code, json.loads(r.stdout)


def test_the_calibration_unchanged_is_valid(files) -> None:
    code, doc = _validate(files, "same")
    assert (code, doc["verdict"]) == (0, "valid"), doc["recommendation"]
    assert not [reg for reg in doc["regions"] if reg["status"] != "ok"]


def test_the_upper_half_of_the_chunk_axis_15pct_slower_is_drifted(files) -> None:
    assert 0.35 <= files["upper_share"] <= 0.45
    code, doc = _validate(files, "slow")
    assert (code, doc["verdict"]) == (1, "drifted"), doc["recommendation"]
    (found,) = [reg for reg in doc["regions"] if reg["axis"] == "points"]
    assert found["direction"] == "slowdown"
    assert found["extent"]["chunk"] == [64, 128]  # the drift's edge, from the data
    # a share of its points reject alone (beyond the point tests' ±10% on 20 repeats of
    # a 15% shift), none outside it: the extent stops at chunk 64
    assert 0 < found["points"] <= found["points_in_extent"] <= 96
    assert found["factor"] == pytest.approx(1.15, abs=0.03)
    assert doc["recommendation"].startswith("recalibrate slowdown at")
    # the fixed band that mixes both halves is never called ok
    band = next(reg for reg in doc["regions"] if reg["region"] == "chunk 1-255")
    assert band["status"] in ("drift", "partly drifted")


def test_text_verdict_exits_1_and_names_the_points(files) -> None:
    r = runner.invoke(app, ["validate", str(files["table"]), str(files["slow"])])
    assert r.exit_code == 1 and r.output.startswith("verdict: drifted"), r.output
    assert "each point alone" in r.output and "chunk 64-128" in r.output


def test_a_shift_beyond_the_tolerance_no_test_confirms_is_undecided() -> None:
    """Five repeats per point cannot reject a point alone at the bound (1/32 > α / m),
    and 22 of 40 points past the tolerance is too few for a count: the median moved
    beyond ±5% all the same, so the verdict is ``undecided`` (exit 2), never valid."""
    rng = np.random.default_rng(5)
    points, repeats = 40, 5
    pid = np.repeat(np.arange(points), repeats)
    n, c = np.full(pid.size, 4), np.full(pid.size, 64)
    shift = np.where(pid < 22, math.log(1.12), 0.0)  # over half the points: the median moves
    r = shift + 0.03 * rng.standard_normal(pid.size)
    res = decide(r, None, pid, n, c)
    assert res.verdict == "undecided" and not res.drifted
    assert "measure more" in res.reason and "beyond ±5%" in res.reason


@pytest.fixture(scope="module")
def noisy() -> dict:
    """The same grid at σ 0.10 (a busier host): a table fitted on it, and the
    calibration unchanged and with chunk >= 64 ×1.15."""
    from servecal.costmodels.fit import fit_cost_table

    truth = SyntheticTruth(decode_attention=2e-5, prefill_attention=1e-6, sigma=0.10)
    points = grid_points(AXES["n_decode"], AXES["chunk"], AXES["ctx"], AXES["prefix"])
    points = points[(points["n_decode"] > 0) | (points["chunk"] > 0)]
    frame = truth.draw(points, REPEATS, np.random.default_rng(138))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = fit_cost_table(frame, PROV, seed=0).table
    slowed = frame.assign(ms=np.where(frame["chunk"] >= 64, frame["ms"] * 1.15, frame["ms"]))
    return {"table": table, "same": frame, "slow": slowed}


def test_at_sigma_010_the_half_space_finds_what_no_point_can(noisy) -> None:
    """At σ 0.10 a point's 20 repeats of a 15% shift rarely all pass ±10%: no point
    rejects alone (the verdict was ``undecided`` with the point tests only). The rows of
    the half-space ``chunk 64+`` pooled (1,856 of them) reject: ``drifted``, and the
    region named is the drift's own edge."""
    from servecal.costmodels.drift.replay import replay

    doc = replay(noisy["table"], noisy["slow"])
    points = next(t for t in doc["tests"] if t["scope"] == "each point" and t["test"] == "slowdown")
    assert not points["rejected"]  # each point alone cannot see it
    assert doc["verdict"] == "drifted", doc["recommendation"]
    (half,) = [reg for reg in doc["regions"] if reg["axis"] == "half-space"]
    assert half["region"] == "slowdown in half-space chunk 64+"
    assert half["factor"] == pytest.approx(1.15, abs=0.04)
    assert doc["recommendation"].startswith("recalibrate slowdown in half-space chunk 64+")


def test_at_sigma_010_the_calibration_unchanged_stays_valid(noisy) -> None:
    from servecal.costmodels.drift.replay import replay

    doc = replay(noisy["table"], noisy["same"])
    assert doc["verdict"] == "valid", doc["recommendation"]
    assert not [t for t in doc["tests"] if t["rejected"]]
