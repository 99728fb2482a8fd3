"""``--format llm-d-sim`` loaded and validated by llm-d-inference-sim v0.10.2's own rules.

:mod:`consumer_llmd` re-implements the simulator's config loading (yaml.v3 into its
``Configuration``, ``time.ParseDuration``) and the start-up checks of ``validate()`` in
``pkg/common/config.go`` at tag v0.10.2, the float32 std-dev comparison included. Every
file servecal writes, for the shipped tables and 1,000 random ones, must pass them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from consumer_llmd import SimConfigError, parse_duration, validate
from tablefactory import small_table
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.export import provenance_path
from servecal.costmodels.export_llmd import (
    DURATION_KEYS,
    MAX_FIT_RMS,
    capped_itl_std_ns,
    fit_sim_profile,
    go_duration,
    sim_config,
    sim_yaml,
)
from servecal.costmodels.table import AXES, CostTable, Margin
from servecal.sched.fitted_table import SHIPPED_PATH

runner = CliRunner()


def old_duration(ms: float) -> str:
    """How servecal wrote durations before: 3 decimals of ms, or 1 of µs."""
    return f"{ms:.3f}ms" if ms >= 1.0 else f"{ms * 1000.0:.1f}us"


def sim_text(itl: str, std: str) -> str:
    return f'latency-calculator: per-token\ninter-token-latency: "{itl}"\n' \
           f'inter-token-latency-std-dev: "{std}"\n'  # fmt: skip


# -- the re-implemented rules ------------------------------------------------------------
def test_parse_duration_is_gos() -> None:
    assert parse_duration("1.347ms") == 1_347_000 and parse_duration("404.2us") == 404_200
    assert parse_duration("1.5h") == 5_400_000_000_000 and parse_duration("2h45m") == 9_900 * 10**9
    assert parse_duration("0") == 0 and parse_duration(".5s") == 500_000_000
    assert parse_duration("1µs") == 1000 and parse_duration("-3ns") == -3
    for bad in ("1", "ms", "", ".s", "1.2.3ms", "5d", "9223372036854775808ns"):
        with pytest.raises(SimConfigError):
            parse_duration(bad)


def test_the_validator_refuses_what_the_simulator_refuses() -> None:
    """The issue's file: ``1.347ms`` with ``404.2us`` is over 30% in float32
    (0.3 * 1347000 = 404100 ns), though 0.3 * the unrounded ITL may not be."""
    with pytest.raises(SimConfigError, match="more than 30%"):
        validate(sim_text("1.347ms", "404.2us"))
    assert validate(sim_text("1.347ms", "404.1us"))["inter-token-latency-std-dev"] == 404_100
    with pytest.raises(SimConfigError, match="unknown key 'engine'"):
        validate("engine: vllm\n")
    with pytest.raises(SimConfigError, match="into time.Duration"):
        validate("inter-token-latency: 5\n")
    with pytest.raises(SimConfigError, match="less than 1.0"):
        validate("time-factor-under-load: 0.999\n")
    with pytest.raises(SimConfigError, match="cannot be negative"):
        validate('prefill-overhead: "-1ms"\n')
    with pytest.raises(SimConfigError, match="model parameter is empty"):
        validate("max-num-seqs: 4\n", model="")
    with pytest.raises(SimConfigError, match="latency-calculator"):
        validate("latency-calculator: linear\n")


def test_the_float32_cap_is_the_largest_accepted_nanosecond() -> None:
    rng = np.random.default_rng(7)
    for itl in [1, 3, 10, 1_347_000, 16_777_217, *rng.integers(1, 10**10, 300).tolist()]:
        cap = capped_itl_std_ns(itl, 10**12)
        assert validate(sim_text(go_duration(itl), go_duration(cap)))
        with pytest.raises(SimConfigError):  # a whole ns more is refused (or rounds over)
            step = 1
            while np.float32(cap + step) == np.float32(cap):
                step += 1
            validate(sim_text(go_duration(itl), go_duration(cap + step)))


def test_go_durations_round_trip_exactly() -> None:
    assert go_duration(12_345_600) == "12.3456ms" and go_duration(250_000) == "250us"
    assert go_duration(404_200) == "404.2us" and go_duration(17) == "17ns"
    assert go_duration(0) == "0s" and go_duration(3_000_000) == "3ms"
    for ns in np.random.default_rng(1).integers(0, 10**13, 2000).tolist():
        assert parse_duration(go_duration(ns)) == ns


# -- every written file --------------------------------------------------------------------
def assert_the_simulator_takes(text: str, profile) -> None:
    """``text`` passes the simulator's checks and holds exactly ``sim_config``'s values."""
    loaded = validate(text)
    for key, value in sim_config(profile).items():
        if key in DURATION_KEYS:
            assert loaded[key] == value, key
        else:
            assert loaded[key] == pytest.approx(value, abs=5e-7), key


def shipped_tables() -> list[tuple[str, CostTable]]:
    return [("small_table", small_table()), ("device_a100_fitted", CostTable.load(SHIPPED_PATH))]


@pytest.mark.parametrize("name", ["small_table", "device_a100_fitted"])
def test_shipped_tables_pass_the_simulators_checks(name: str) -> None:
    table = dict(shipped_tables())[name]
    for m in (32, 64, 256, 1024):
        for ctx in [None, *table.axes["ctx"]]:
            profile = fit_sim_profile(table, m, ctx)
            assert_the_simulator_takes(sim_yaml(profile, name), profile)


def random_table(rng: np.random.Generator) -> CostTable:
    """Random grids; times rising along every axis, from µs to seconds; a P99 from equal
    to the P50 to several times it (so the std-dev cap is often reached)."""
    axes = {
        "n_decode": [0] + sorted(rng.choice(np.arange(1, 600), rng.integers(2, 6), False)),
        "ctx": sorted(rng.choice(np.arange(0, 33000), rng.integers(1, 4), False)),
        "prefix": [0],
        "chunk": [0] + sorted(rng.choice(np.arange(1, 17000), rng.integers(2, 6), False)),
    }
    axes = {k: [int(x) for x in v] for k, v in axes.items()}
    shape = tuple(len(axes[a]) for a in AXES)
    p50 = 10.0 ** rng.uniform(-3, 1) * rng.uniform(0.05, 1.0, shape)
    for axis in range(4):
        p50 = np.cumsum(p50, axis=axis)
    p99 = p50 * (1.0 + rng.uniform(0.0, 3.0) * rng.uniform(0.5, 1.0, shape))
    p99 = np.maximum.accumulate(np.maximum.accumulate(p99, axis=0), axis=3)
    p99 = np.maximum.accumulate(p99, axis=1)
    return CostTable(axes, {0.5: p50, 0.99: p99}, Margin(0.99, 0.0, 0.99, None, 1, 1))


def test_a_thousand_random_tables_pass_the_simulators_checks() -> None:
    rng = np.random.default_rng(20261202)
    capped = old_refused = 0
    for _ in range(1000):
        table = random_table(rng)
        m = int(rng.integers(table.axes["n_decode"][2], 2000))  # two decode loads
        ctx_axis = table.axes["ctx"]
        ctx = None if rng.random() < 0.5 else float(rng.uniform(ctx_axis[0], ctx_axis[-1]))
        profile = fit_sim_profile(table, m, ctx)
        assert_the_simulator_takes(sim_yaml(profile, "random"), profile)
        if profile.itl_std_ms > 0.3 * profile.itl_ms:
            capped += 1
            old = sim_text(old_duration(profile.itl_ms), old_duration(0.3 * profile.itl_ms))
            try:
                validate(old)
            except SimConfigError:
                old_refused += 1
    assert capped >= 100  # the cap is exercised
    assert old_refused > 0  # and the old rounding would have been refused


# -- the command -----------------------------------------------------------------------------
def test_cli_refuses_a_fit_beyond_the_bound_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "sim.yaml"
    args = ["export", str(SHIPPED_PATH), "--format", "llm-d-sim", "--out", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and r.output.startswith("error: ")
    assert f"> {MAX_FIT_RMS:.0%}" in r.output and "--ctx" in r.output
    assert not out.exists() and not provenance_path(out).exists()
    r = runner.invoke(app, [*args, "--force"])
    assert r.exit_code == 0, r.output
    assert "written anyway (--force)" in r.output
    assert "engine" not in out.read_text() and validate(out.read_text())
    r = runner.invoke(app, [*args, "--ctx", "2048"])
    assert r.exit_code == 0 and "RMS error 0." in r.output, r.output
    r = runner.invoke(app, [*args, "--ctx", "99999"])
    assert r.exit_code == 2 and "outside the table's ctx axis" in r.output
