"""The report answers first: which policy sustains the most within SLO, by how much, on
what; the Scheduling section opens with attainment against rate; calibration's value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from reportkit import search, write_run

from servecal.reports import discover
from servecal.reports.answer import answer_section
from servecal.reports.calibration_value import calibration_value_section
from servecal.reports.scheduling import scheduling_section

DEVICE = {"truth": "device", "predictor": "fitted", "rate": 60.0}
#: max goodput per (workload, policy) of the searched factory below
CAPACITY = {("mixed", "fixed-512"): 48.0, ("mixed", "fixed-2048"): 20.0,
            ("mixed", "sloweave"): 52.0, ("long", "fixed-512"): 23.0,
            ("long", "fixed-2048"): 9.0, ("long", "sloweave"): 22.9}  # fmt: skip


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("searched")
    rng = np.random.default_rng(3)
    for (workload, policy), capacity in CAPACITY.items():
        for seed in range(2):
            write_run(root / f"{workload}-{policy}-{seed}", rng, policy, workload, 10.0, seed,
                      config=DEVICE, search=search(capacity * (1 + 0.01 * seed)))  # fmt: skip
    return root


def _mean_max(workload: str, policy: str) -> float:
    capacity = CAPACITY[(workload, policy)]
    return sum(search(capacity * (1 + 0.01 * seed))["max_goodput"] for seed in range(2)) / 2


def _texts(section) -> list[str]:
    return [b.text for b in section.blocks if hasattr(b, "text")]


def test_the_answer_names_the_leader_its_margin_and_the_truth_and_predictor(searched) -> None:
    section = answer_section(discover([searched]).runs)
    texts = _texts(section)
    assert texts[0].startswith("Under truth device · predictor fitted. Ranked by maximum goodput")
    mixed = next(t for t in texts if t.startswith("mixed"))
    # about 52 vs 48 req/s: sloweave leads fixed-512 by ~8%, named with its value
    ratio = _mean_max("mixed", "sloweave") / _mean_max("mixed", "fixed-512")
    assert 1.05 < ratio < 1.12
    assert "sloweave sustains the most" in mixed
    assert f"{ratio:.2f}× the best static, fixed-512 (" in mixed
    long = next(t for t in texts if t.startswith("long"))
    # 23 vs 22.9: fixed-512 leads, and the gap is inside the searches' 2% resolution: a tie
    assert "fixed-512 sustains the most" in long and "ties with the best adaptive" in long
    (table,) = section.tables
    assert [r[2] for r in table.rows] == ["sloweave", "fixed-512"]
    assert table.rows[0][4].startswith("fixed-512 (")


def test_without_searches_the_answer_says_it_ranks_at_the_offered_rate(grid_dir) -> None:
    texts = _texts(answer_section(discover([grid_dir]).runs))
    assert "truth and predictor not recorded" in texts[0]
    assert "No max-goodput search in these runs" in texts[0]


def test_the_answer_warns_about_the_oracle(tmp_path) -> None:
    rng = np.random.default_rng(4)
    write_run(tmp_path / "a", rng, "sloweave", "mixed", 25.0, 0,
              config={**DEVICE, "predictor": "oracle"})  # fmt: skip
    texts = _texts(answer_section(discover([tmp_path]).runs))
    assert any(t.startswith("Warning: runs of sloweave planned on the oracle") for t in texts)


def test_scheduling_opens_with_attainment_against_rate_and_tables_max_goodput(searched) -> None:
    section = scheduling_section(discover([searched]).runs)
    assert section.blocks[0].title == "SLO attainment against arrival rate"
    assert "truth device · predictor fitted" in section.blocks[0].caption
    table = next(t for t in section.tables if t.title == "TPOT target 10 ms")
    assert table.columns[-2:] == ("max goodput (req/s)", "max goodput / best static")
    row = next(r for r in table.rows if r[:2] == ("mixed", "sloweave"))
    ratio = _mean_max("mixed", "sloweave") / _mean_max("mixed", "fixed-512")
    assert row[-2].startswith(f"{_mean_max('mixed', 'sloweave'):.3g}")
    assert row[-1] == f"{ratio:.3f}×"
    ratio = next(t for t in section.tables if t.title == "Ratio to the best static policy")
    assert {r[7] for r in ratio.rows} == {"max goodput"}


def test_calibration_value_compares_planning_models_at_one_rate(tmp_path) -> None:
    rng = np.random.default_rng(5)
    base = {"truth": "device", "rate": 50.0}
    setups = {
        "a": ("sloweave", {"predictor": "oracle"}),
        "b": ("sloweave", {"predictor": "fitted"}),
        "c": ("sloweave-p50", {"predictor": "fitted"}),
        "d": ("sloweave", {"predictor": "fitted", "drift": "30%:1.15", "monitor": True}),
        "e": ("sloweave", {"predictor": "fitted", "drift": "30%:1.15", "adaptive_margin": True}),
    }
    for key, (policy, extra) in setups.items():
        write_run(tmp_path / key, rng, policy, "mixed", 25.0, 0, config={**base, **extra},
                  search=search(50.0))  # fmt: skip
    write_run(tmp_path / "other", rng, "fixed-512", "mixed", 25.0, 0, config=base)
    section = calibration_value_section(discover([tmp_path]).runs)
    (table,) = section.tables
    assert table.title == "mixed, TPOT 25 ms, at 50 req/s"
    assert [r[0][:3] for r in table.rows] == ["(a)", "(b)", "(c)", "(d)", "(e)"]
    assert "drift 30%:1.15" in table.rows[3][0] and "adaptive margin" in table.rows[4][0]
    assert all(r[5] != "—" for r in table.rows)  # each configuration's own max goodput
    # one configuration alone compares nothing: no section
    assert calibration_value_section(discover([tmp_path / "b"]).runs) is None


def test_the_answer_says_where_the_margin_decided_the_maximum(tmp_path, searched) -> None:
    mixed = next(t for t in _texts(answer_section(discover([searched]).runs))
                 if t.startswith("mixed"))  # fmt: skip
    # the factory's bisection probes miss TPOT as much as anything: the margin decided
    assert "sloweave's maximum is where its TPOT attainment falls below the target (" in mixed
    assert "fixed-512's maximum" not in mixed  # a fixed chunk has no planning margin
    rng = np.random.default_rng(5)
    for policy, capacity in (("sloweave", 52.0), ("fixed-512", 48.0)):
        ttft_bound = search(capacity)
        for probe in ttft_bound["probes"]:
            probe["tpot_attainment"] = 1.0  # every request within TPOT: TTFT set the maximum
        write_run(tmp_path / policy, rng, policy, "mixed", 10.0, 0, config=DEVICE,
                  search=ttft_bound)  # fmt: skip
    (line,) = [t for t in _texts(answer_section(discover([tmp_path]).runs))
               if t.startswith("mixed")]  # fmt: skip
    assert "sloweave sustains the most" in line and "margin decided" not in line
