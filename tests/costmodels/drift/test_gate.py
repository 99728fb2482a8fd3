"""The validate gate's statistics: exact critical values, the bound, exact single-row stability."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servecal.costmodels.drift.gate import (
    Bands,
    GateConfig,
    decide,
    quarters_of,
    row_kinds,
    tail_critical,
    tail_p_value,
    vote_critical,
    vote_p_value,
)

CONFIG = GateConfig()
TAU = CONFIG.tau_up


def _binom_tail(k: int, n: int) -> float:
    return sum(math.comb(n, j) for j in range(k, n + 1)) / 2**n


@pytest.mark.parametrize("n", [1, 5, 10, 13, 20, 47, 150])
@pytest.mark.parametrize("alpha", [CONFIG.alpha_global, CONFIG.alpha_band(9), 0.05])
def test_vote_critical_is_the_exact_binomial_quantile(n: int, alpha: float) -> None:
    k = vote_critical(n, alpha)
    if k <= n:
        assert _binom_tail(k, n) <= alpha
    assert k == 0 or _binom_tail(k - 1, n) > alpha
    assert vote_p_value(k, n) == pytest.approx(_binom_tail(k, n)) if k <= n else True


def test_min_clusters_is_where_the_global_vote_can_first_reject() -> None:
    need = CONFIG.min_clusters
    assert vote_critical(need, CONFIG.alpha_global) <= need
    assert vote_critical(need - 1, CONFIG.alpha_global) == need  # cannot reject


@pytest.mark.parametrize("g", [10, 50, 400])
def test_tail_critical_spends_exactly_alpha(g: int) -> None:
    a, null = CONFIG.alpha_global, CONFIG.tail_null
    crit = tail_critical(g, null, a)
    assert crit > null
    assert tail_p_value(crit, g, null) == pytest.approx(a, rel=1e-6)
    assert tail_p_value(crit * 0.99, g, null) > a
    assert tail_critical(4 * g, null, a) < crit  # more points: a smaller excess suffices


def _rows(rng: np.random.Generator, points: int, repeats: int, shift: float, sigma: float):
    """Rows of ``points`` grid points on a 5 × 4 (n_decode, chunk) layout."""
    n_axis, c_axis = (1, 4, 16, 64, 256), (0, 128, 512, 2048)
    pid = np.repeat(np.arange(points), repeats)
    n = np.array(n_axis)[pid % 5]
    c = np.array(c_axis)[(pid // 5) % 4]
    r = shift + sigma * rng.standard_normal(pid.size)
    exceed = r > shift + 2.326 * sigma * 1.1
    return r, exceed, pid, n, c


def test_same_truth_is_valid_and_a_shift_is_drifted() -> None:
    rng = np.random.default_rng(0)
    r, x, pid, n, c = _rows(rng, 120, 10, 0.0, 0.05)
    res = decide(r, x, pid, n, c)
    assert res.verdict == "valid" and res.stability["stable"]
    assert res.factor == pytest.approx(1.0, abs=0.01)
    r2, x2, *_ = _rows(rng, 120, 10, math.log(1.10), 0.05)
    res = decide(r2, x2, pid, n, c)
    assert res.verdict == "drifted" and res.factor == pytest.approx(1.10, abs=0.01)
    assert [t["test"] for t in res.tests if t["rejected"]] == ["slowdown"]


def test_verdict_does_not_depend_on_row_order() -> None:
    rng = np.random.default_rng(1)
    r, x, pid, n, c = _rows(rng, 60, 8, 0.04, 0.05)
    a = decide(r, x, pid, n, c)
    perm = rng.permutation(r.size)
    b = decide(r[perm], x[perm], pid[perm], n[perm], c[perm])
    assert (a.verdict, a.tests, a.factor) == (b.verdict, b.tests, b.factor)


def test_model_error_within_the_tolerance_is_not_drift() -> None:
    """Every point biased by just under the tolerance: the null's edge, still valid."""
    rng = np.random.default_rng(2)
    alarms = 0
    for _ in range(50):
        r, x, pid, n, c = _rows(rng, 80, 5, TAU * 0.98, 0.05)
        alarms += decide(r, None, pid, n, c).drifted
    assert alarms <= 2  # the bound is 1% per call: 0.5 expected


def test_one_band_slowed_is_attributed_to_it() -> None:
    rng = np.random.default_rng(3)
    r, x, pid, n, c = _rows(rng, 200, 6, 0.0, 0.05)
    r = r + np.where(c >= 1024, math.log(1.2), 0.0)
    res = decide(r, None, pid, n, c)
    moved = [reg["region"] for reg in res.regions if reg["status"] == "drift"]
    assert moved == ["chunk 1024+"]


def _small_calibration(rng, n_axis, c_axis, repeats: int = 10, sigma: float = 0.03):
    """A demo-sized calibration: 42 grid points × ``repeats``, the table exact."""
    grid = [(nd, ch) for nd in n_axis for ch in c_axis]
    pid = np.repeat(np.arange(len(grid)), repeats)
    n = np.array([grid[k][0] for k in pid])
    c = np.array([grid[k][1] for k in pid])
    return sigma * rng.standard_normal(pid.size), pid, n, c


@pytest.mark.parametrize(
    ("axis", "edge", "n_axis", "c_axis"),
    [
        ("chunk", 256, (1, 2, 4, 8, 16, 24), (0, 32, 64, 128, 200, 300, 1500)),
        ("n_decode", 32, (1, 2, 4, 8, 16, 48, 96), (0, 64, 128, 200, 300, 1500)),
    ],
)
def test_a_region_of_a_fifth_of_the_rows_slowed_15pct_is_drift(axis, edge, n_axis, c_axis):
    """The audit's case: on a 42-point calibration, every iteration with chunk ≥ 256
    (or ≥ 32 decodes), 29% of the rows, 15% slower. Neither of its bands alone holds
    enough points to speak; the tail region does, and it is named."""
    rng = np.random.default_rng(11)
    r, pid, n, c = _small_calibration(rng, n_axis, c_axis)
    inside = (c if axis == "chunk" else n) >= edge
    assert 0.2 <= inside.mean() <= 0.3
    same = decide(r, None, pid, n, c)
    assert same.verdict == "valid"
    res = decide(r + np.where(inside, math.log(1.15), 0.0), None, pid, n, c)
    assert res.verdict == "drifted", res.tests
    moved = [reg["region"] for reg in res.regions if reg["status"] == "drift"]
    assert f"{axis} {edge}+" in moved
    assert not [t for t in res.tests if t["rejected"]]  # the global tests did not see it


def test_too_few_points_cannot_decide() -> None:
    rng = np.random.default_rng(4)
    r, x, pid, n, c = _rows(rng, CONFIG.min_clusters - 1, 30, 0.5, 0.05)
    with pytest.raises(ValueError, match="grid points"):
        decide(r, x, pid, n, c)


def _kind(r: np.ndarray, x: np.ndarray) -> np.ndarray:
    return row_kinds(r, x, CONFIG)


def _brute_force_flips(r, x, pid, n, c) -> set[int]:
    full = decide(r, x, pid, n, c).drifted
    flips = set()
    for i in range(r.size):
        keep = np.arange(r.size) != i
        try:
            if decide(r[keep], x[keep], pid[keep], n[keep], c[keep]).drifted != full:
                flips.add(i)
        except ValueError:  # too few points left: not a flip of valid/drifted
            pass
    return flips


def test_single_row_stability_is_exact_on_a_knife_edge() -> None:
    """18 of 20 points vote up with 2 of 3 rows past the tolerance: exactly the critical
    count of the global test (and of the regions they all lie in). Removing one of
    those rows flips; nothing else does."""
    assert vote_critical(20, CONFIG.alpha_global) == 18
    rng = np.random.default_rng(5)
    pid = np.repeat(np.arange(20), 3)
    r = np.full(60, 0.0) + 0.001 * rng.standard_normal(60)
    voting = pid < 18
    first_two = np.tile([True, True, False], 20)
    r[voting & first_two] = 0.08  # past the 5% tolerance
    x = np.zeros(60, bool)
    x[::7] = True  # a few tail hits, to have mixed kinds of rows
    n, c = np.full(60, 8), np.full(60, 512)
    res = decide(r, x, pid, n, c)
    assert res.drifted and res.verdict == "undecided"
    brute = _brute_force_flips(r, x, pid, n, c)
    assert brute == set(np.flatnonzero(voting & first_two))
    kinds = {(pid[i], _kind(r, x)[i]) for i in res.flips}
    assert {i for i in range(60) if (pid[i], _kind(r, x)[i]) in kinds} == brute


def test_single_row_stability_matches_brute_force() -> None:
    """Random small sets near the boundary: the exact check equals deleting every row."""
    fragile = 0
    for seed in range(12):
        rng = np.random.default_rng(100 + seed)
        points = 14 + seed
        pid = np.repeat(np.arange(points), rng.integers(1, 4, points))
        r = TAU + 0.02 + 0.03 * rng.standard_normal(pid.size)
        x = rng.random(pid.size) < 0.1
        n = np.array((1, 8, 64))[pid % 3]
        c = np.array((0, 256, 2048))[(pid // 3) % 3]
        res = decide(r, x, pid, n, c)
        brute = _brute_force_flips(r, x, pid, n, c)
        kinds = {(pid[i], _kind(r, x)[i]) for i in res.flips}
        assert {i for i in range(pid.size) if (pid[i], _kind(r, x)[i]) in kinds} == brute
        assert res.stability["stable"] == (not brute)
        fragile += bool(brute)
    assert fragile >= 2  # the sets do reach the knife edge


def test_quarters_and_bands() -> None:
    q = quarters_of(np.array([5.0, 1.0, 3.0, 2.0, 4.0, 0.0, 7.0, 6.0]))
    assert q.tolist() == [2, 0, 1, 1, 2, 0, 3, 3]
    b = Bands(quarters=True)
    rows = b.of(np.array([0, 100]), np.array([2048, 0]), np.array([0, 3]))
    labels = [[b.describe(int(v))["region"] for v in row if v < b.size] for row in rows]
    assert labels == [
        ["n_decode 0", "chunk 1024+", "time quarter 1 of 4", "chunk 256+"],
        ["n_decode 32-127", "chunk 0", "time quarter 4 of 4", "n_decode 8+", "n_decode 32+"],
    ]
