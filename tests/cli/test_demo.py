"""``servecal demo`` end to end with a small budget: every report section has content.

The fast test seeds the demo's output folder with synthetic samples (the demo then
fits them, as it does after measuring, and reuses them as on a resumed run), so it
checks fit → derived targets → simulation → report in seconds. The slow test also
measures the `tiny` model on this CPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels import CostTable
from servecal.costmodels.samples import write_samples
from servecal.costmodels.synthetic import SyntheticTruth, grid_points

sys.path.insert(0, str(Path(__file__).parents[1] / "reports"))
from reporthtml import check  # noqa: E402

runner = CliRunner()
SMALL = ["--seeds", "1", "--requests", "30", "--workloads", "mixed", "--token-scale", "0.03125"]


def _seed_samples(out: Path, metered: bool = True) -> None:
    """Samples as `calibrate` would leave them, drawn from a known truth (``metered``:
    with energy, as on a host with a meter; else ``energy_j`` null, as without)."""
    points = grid_points((0, 2, 8, 32, 64), (0, 8, 32, 128), (64, 512, 2048), (0, 64))
    truth = SyntheticTruth(decode_attention=2e-5, prefill_attention=1e-6)
    frame = truth.draw(points, 10, np.random.default_rng(0))
    if not metered:
        frame["energy_j"] = np.nan
    (out / "calibration").mkdir(parents=True)
    write_samples(frame, out / "calibration" / "samples.parquet", {"model": "synthetic"})


def _run(out: Path, *extra: str) -> None:
    result = runner.invoke(app, ["demo", "--out", str(out), "--device", "cpu", *SMALL, *extra])
    assert result.exit_code == 0, result.output
    assert str(out / "report" / "report.html") in result.output


def _check_gate(out: Path, timed: bool = False) -> None:
    """The demo's table against the demo's own calibration samples: on drawn samples the
    gate says valid; on samples timed on this CPU (``timed``) it checks every row and
    reaches a verdict whose exit code is its own (a loaded host's own-table shift can
    lie beyond ±5%: then it says "measure more", which is no fault of the demo)."""
    table = out / "calibration" / "costtable.json"
    assert json.loads(table.read_text())["content_hash"] == CostTable.load(table).content_hash()
    r = runner.invoke(
        app, ["validate", str(table), str(out / "calibration" / "samples.parquet"), "--json"]
    )
    doc = json.loads(r.stdout)
    assert doc["checked_share"] == 1
    assert r.exit_code == {"valid": 0, "drifted": 1, "undecided": 2}[doc["verdict"]], r.output
    if not timed:
        assert doc["verdict"] == "valid" and doc["stability"]["stable"], r.output


def _check_report(out: Path, timed: bool = False) -> None:
    seeds = list((out / "runs").glob("mixed/*/tpot-*/seed-0/run.json"))
    assert len(seeds) == 4 * 3  # four policies x three derived targets
    assert (out / "calibration" / "costtable.json").is_file()
    _check_gate(out, timed)
    html = (out / "report" / "report.html").read_text(encoding="utf-8")
    parsed = check(html)
    assert parsed.errors == []
    assert parsed.section_ids == ["answer", "setup", "calibration", "scheduling", "energy", "drift"]
    assert len(parsed.images) >= 8 and parsed.tables >= 10
    md = (out / "report" / "report.md").read_text(encoding="utf-8")
    sections = {part.split("\n", 1)[0].strip(): part for part in md.split("\n## ")[1:]}
    assert "TPOT targets come from this calibration" in sections["Setup"]
    # the demo searches each cell's max goodput: the answer ranks by it, and the
    # scheduling section opens with the curves the searches walked
    answer = sections["Answer"]
    assert answer.split("\n", 1)[1].lstrip().startswith("*Figure: Highest rate within SLO")
    assert "### Max goodput (req/s) by policy" in answer
    assert "| workload | TPOT (ms) | fixed-8 | fixed-32 | full | SLOWeave | verdict |" in answer
    assert "Policies: SLOWeave = sloweave with aging_chunk=" in answer  # the options, once
    rows = [r for r in answer.splitlines() if r.startswith("| mixed |")]
    assert len(rows) == 3
    # a cell where nothing sustains load says so (targets are lifted when even the
    # cheapest policy misses at the floor, but a TTFT-bound cell on a loaded host
    # can still have none); otherwise the verdict names the leader or a tie
    for r in rows:
        cells = [v.strip() for v in r.split("|")[3:7]]
        none = all(v in ("< floor", "—") for v in cells)
        assert ("none sustains load" in r) == none, r
    assert "none sustains load" not in answer
    first = sections["Scheduling"].split("\n", 1)[1].lstrip()
    assert first.startswith("*Figure: SLO attainment against arrival rate*")
    run = json.loads(next(iter(seeds)).read_text())
    assert run["goodput_search"]["probes"] and run["goodput_search"]["bracket"]["rel_tol"] == 0.05
    assert "| samples (timed iterations) |" in sections["Calibration"]
    assert "*Figure: Predicted vs measured*" in sections["Calibration"]
    assert "| mixed | SLOWeave |" in sections["Scheduling"]
    assert "sloweave[" not in md.split("Policies: SLOWeave = ")[0]  # short labels only
    assert "Ratio to the best static policy" in sections["Scheduling"]
    assert "| mixed | SLOWeave" in sections["Energy"]
    assert "Online validation per run" in sections["Drift"]
    assert "Monitor state changes" in sections["Drift"]  # the monitor ran on SLOWeave


def test_demo_small_budget_every_section_has_content(tmp_path: Path) -> None:
    _seed_samples(tmp_path)
    _run(tmp_path, "--budget", "30")
    _check_report(tmp_path)
    # The synthetic samples carry energy: the energy table names its source.
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "bootstrapped from the calibration samples' energy" in md


def test_demo_without_a_meter_models_energy_and_says_so(tmp_path: Path) -> None:
    _seed_samples(tmp_path, metered=False)
    _run(tmp_path, "--budget", "30")
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    energy = md.split("\n## Energy", 1)[1].split("\n## ", 1)[0]
    assert "| modelled: power model a100-llama3-8b (not measured) |" in energy
    assert "| unavailable |" not in energy and "Ranking: goodput and energy" in energy
    assert "the calibration had no energy meter" in md  # the preface says why
    run = json.loads(
        next(iter((tmp_path / "runs").glob("mixed/*/tpot-*/seed-0/run.json"))).read_text()
    )
    assert run["energy_source"] == "model:a100-llama3-8b"


def test_demo_bad_budget_is_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--budget", "5", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--budget" in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_demo_measures_this_cpu(tmp_path: Path) -> None:
    _run(tmp_path, "--budget", "60")
    _check_report(tmp_path, timed=True)
