"""Each report section has real content for a small synthetic run and calibration."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from reportkit import write_run

from servecal.reports import discover
from servecal.reports.calibration import calibration_section, coverage_by, predictions
from servecal.reports.drift import drift_section, state_changes
from servecal.reports.energy import energy_rows, energy_section, reference_table
from servecal.reports.scheduling import scheduling_section


def test_calibration_section_has_figures_tables_and_fingerprint(calibration) -> None:
    section = calibration_section([calibration])
    titles = [f.title for f in section.figures]
    for wanted in ("Predicted vs measured", "coverage by bucket", "Residual", "heat map"):
        assert any(wanted.lower() in t.lower() for t in titles), wanted
    tables = {t.title: t for t in section.tables}
    assert dict(tables["Fingerprint"].rows)["device_name"] == "synthetic CPU"
    # The factory's domain stops at n_decode = 16: the 64-row bucket is out of domain.
    assert dict(tables["Out-of-domain rows"].rows)["n_decode"] == "48"
    assert len(tables["Coverage by n_decode"].rows) == 5


def test_coverage_by_bucket_matches_a_hand_count(calibration) -> None:
    pred = predictions(calibration)
    table = coverage_by(pred, "chunk")
    for label, row in table.iterrows():
        rows = pred[pred["chunk"] == int(label)]
        assert row.rows == len(rows)
        assert math.isclose(row.coverage, (rows["ms"] <= rows["p99"] + rows["margin"]).mean())


def test_calibration_section_without_input_says_so() -> None:
    section = calibration_section([])
    assert not section.figures and "No calibration" in section.blocks[0].text


def test_scheduling_tables_per_target_and_ratio(grid_dir: Path) -> None:
    runs = discover([grid_dir]).runs
    section = scheduling_section(runs)
    titles = [t.title for t in section.tables]
    assert "TPOT target 10 ms" in titles and "TPOT target 25 ms" in titles
    ratio = next(t for t in section.tables if t.title == "Ratio to the best static policy")
    # sloweave was built to beat the static policies in every cell of the factory.
    assert len(ratio.rows) == 4
    assert all(float(r[6].rstrip("×")) > 1.0 for r in ratio.rows)
    target = next(t for t in section.tables if t.title == "TPOT target 10 ms")
    assert [r[0] for r in target.rows][:3] == ["mixed"] * 3  # the paper's workload order
    best = [r for r in target.rows if r[1] == "fixed-256"]
    assert all(r[6] == "1.00×" for r in best)
    figs = [f.title for f in section.figures]
    assert sum("distributions" in t for t in figs) == 2
    assert sum("SLOWeave chunk size" in t for t in figs) == 1


def test_energy_rows_name_their_source_and_never_mix(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    write_run(tmp_path / "a", rng, "sloweave", "mixed", 25.0, 0, energy_source="rapl")
    write_run(tmp_path / "b", rng, "sloweave", "mixed", 25.0, 1, energy_source="nvml")
    write_run(tmp_path / "c", rng, "full", "mixed", 25.0, 0, energy_source="unavailable")
    runs = discover([tmp_path]).runs
    rows = energy_rows(runs)
    assert sorted(r.source for r in rows) == ["NVML", "RAPL", "unavailable"]
    assert all(r.seeds == 1 for r in rows)  # two sloweave seeds, two sources: not averaged
    unavailable = next(r for r in rows if r.source == "unavailable")
    assert math.isnan(unavailable.j_per_good_request)
    rapl = next(r for r in rows if r.source == "RAPL")
    run_a = next(r for r in runs if r.path.name == "a")
    assert math.isclose(rapl.j_per_good_request, run_a.summary["energy_per_good_request_j"])
    section = energy_section(runs)
    text = section.blocks[0].text
    assert "NVML" in text and "RAPL" in text and "servecal's definition" in text


def test_energy_reference_matches_only_the_published_setting(grid_dir: Path) -> None:
    runs = discover([grid_dir]).runs

    def reference(device: str, model: str) -> list[str]:
        return [r[-1] for r in reference_table(runs, device, model).rows]

    assert reference("NVIDIA A100-SXM4-80GB", "llama-3-8b") == ["yes", "no"]
    assert reference("cpu", "tiny") == ["no", "no"]


def test_drift_section_shows_state_changes(grid_dir: Path) -> None:
    runs = discover([grid_dir]).runs
    section = drift_section(runs)
    changes = next(t for t in section.tables if t.title == "Monitor state changes")
    assert [r[-1] for r in changes.rows][:3] == ["ok", "warn", "drift"]
    assert section.figures
    validation = next(t for t in section.tables if t.title == "Online validation per run")
    assert len(validation.rows) == len(runs)


def test_state_changes_indices() -> None:
    import pandas as pd

    states = ["ok", "ok", "warn", "warn", "ok"]
    it = pd.DataFrame({"start_ms": [0.0, 1, 2, 3, 4], "drift_state": states})
    assert state_changes(it) == [(0, 0.0, "ok"), (2, 2.0, "warn"), (4, 4.0, "ok")]


def test_bootstrapped_energy_names_the_calibration_meter(tmp_path: Path) -> None:
    write_run(tmp_path / "s", np.random.default_rng(6), "sloweave", "chat", 50.0, 0, "samples")
    runs = discover([tmp_path]).runs
    table = next(t for t in energy_section(runs, sample_meter="nvml").tables)
    assert table.rows[0][6] == "bootstrapped from the calibration samples' energy (NVML)"
    plain = next(t for t in energy_section(runs).tables)
    assert plain.rows[0][6] == "bootstrapped from the calibration samples' energy"
