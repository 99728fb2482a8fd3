"""The energy section's ranking: J per good request at the common rate and at each policy's
own max goodput, beside goodput; modelled, metered and unavailable energy all rendered."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from reportkit import write_run
from typer.testing import CliRunner

from servecal.cli import app
from servecal.reports.energy import energy_at_max, energy_section, rank_rows, ranks
from servecal.reports.loading import discover, energy_source_name
from servecal.reports.render import to_markdown

runner = CliRunner()
SMALL = ["--workloads", "mixed", "--tpot-slo", "25", "--seeds", "1", "--requests", "120",
         "--rates", "mixed=40"]  # fmt: skip


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("compare")
    args = ["compare", "--out", str(out), "--policies", "sloweave,fixed-512,full", *SMALL,
            "--max-goodput", "--rate-range", "10:80", "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


def test_each_policy_is_priced_at_its_own_max_goodput_and_at_the_common_rate(searched):
    runs = discover([searched]).runs
    rows = {r.policy: r for r in rank_rows(runs)}
    assert set(rows) == {"sloweave", "fixed-512", "full"}
    for run in runs:
        row = rows[run.policy]
        assert row.source == "modelled: power model a100-llama3-8b (not measured)"
        assert row.rate == 40.0 and row.bound == "measured"
        assert row.j_at_rate == pytest.approx(run.summary["energy_per_good_request_j"])
        # the energy at the maximum is the search's own probe at the rate it found
        probe = next(p for p in run.search["probes"] if p["rate"] == run.search["max_goodput"])
        assert (
            row.j_at_max == pytest.approx(probe["energy_per_good_request_j"]) and row.j_at_max > 0
        )
        assert row.max_goodput == run.search["max_goodput"]
    section = energy_section(runs)
    table = next(t for t in section.tables if t.title.startswith("Ranking"))
    by_policy = {r[4]: r for r in table.rows}
    cheapest = min(rows.values(), key=lambda r: r.j_at_max)
    assert by_policy[cheapest.policy][8].endswith("(1)")
    most = max(rows.values(), key=lambda r: r.max_goodput)
    assert by_policy[most.policy][7].endswith("(1)")
    assert "Modelled energy is a power model's watts" in section.blocks[0].text
    # priced by the A100 Llama-3-8B model: the published A100 row is this setting's
    reference = next(t for t in section.tables if t.title.startswith("Reference"))
    assert [row[-1] for row in reference.rows] == ["yes", "no"]


def test_runs_without_energy_say_unavailable_in_every_energy_column(tmp_path):
    args = ["compare", "--out", str(tmp_path), "--policies", "sloweave,full", *SMALL,
            "--power", "none", "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    runs = discover([tmp_path]).runs
    assert {r.energy_source for r in runs} == {"unavailable"}
    section = energy_section(runs)
    per_policy = section.tables[0]
    assert {row[6] for row in per_policy.rows} == {"unavailable"}
    assert {row[4] for row in per_policy.rows} == {"—"}
    ranking = next(t for t in section.tables if t.title.startswith("Ranking"))
    assert {row[6] for row in ranking.rows} == {"—"}  # no energy: no energy rank
    assert all(row[5] != "—" for row in ranking.rows)  # the goodput ranking stays
    page = to_markdown("t", [], [section], "report.html")
    assert "| unavailable |" in page and "Ranking: goodput and energy per good request" in page


def test_a_metered_run_and_a_fake_meter_render_their_rows(tmp_path):
    rng = np.random.default_rng(5)
    write_run(tmp_path / "a", rng, "sloweave", "mixed", 25.0, 0, energy_source="fake",
              config={"rate": 40.0})  # fmt: skip
    write_run(tmp_path / "b", rng, "fixed-512", "mixed", 25.0, 0, energy_source="measured:nvml",
              config={"rate": 40.0})  # fmt: skip
    runs = discover([tmp_path]).runs
    rows = rank_rows(runs)
    assert sorted(r.source for r in rows) == ["NVML", "fake meter (a test's, not a device's)"]
    assert all(r.j_at_rate > 0 and math.isnan(r.j_at_max) for r in rows)  # not searched


def test_ranks_and_bounds():
    assert ranks([3.0, math.nan, 1.0, 3.0], higher_is_better=False) == [2, None, 1, 2]
    assert ranks([3.0, 1.0], higher_is_better=True) == [1, 2]
    probes = [{"rate": 10.0, "energy_per_good_request_j": 5.0}, {"rate": 20.0}]
    assert energy_at_max({"max_goodput": 10.0, "probes": probes}) == 5.0
    assert math.isnan(energy_at_max({"max_goodput": 20.0, "probes": probes}))  # no energy
    assert math.isnan(energy_at_max({"max_goodput": 10.0, "bound": "above_cap", "probes": probes}))
    assert energy_source_name("model:a100-llama3-8b").startswith("modelled: power model a100")


def test_the_demo_models_energy_only_when_its_calibration_had_no_meter(tmp_path):
    from servecal.costmodels.samples import write_samples
    from servecal.reports.demo.simulation import demo_power

    rows = [(n, c, 0, 0, 1.0 + n * 0.01 + c * 0.001, e, r)
            for n in (0, 4) for c in (0, 64) if n + c for r in range(3)
            for e in [math.nan]]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["n_decode", "chunk", "ctx", "prefix", "ms", "energy_j",
                                        "rep"])  # fmt: skip
    write_samples(frame, tmp_path / "none.parquet", {"model": "t"})
    write_samples(frame.assign(energy_j=frame.ms * 0.05), tmp_path / "rapl.parquet", {"model": "t"})
    assert demo_power(tmp_path / "none.parquet") == "a100-llama3-8b"
    assert demo_power(tmp_path / "rapl.parquet") is None
