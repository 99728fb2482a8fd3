"""The gate's one-sentence recommendation, case by case, from a verdict document."""

from __future__ import annotations

from typing import Any

from servecal.costmodels.drift.replay import NAME_REGIONS, _recommend


def _doc(verdict: str, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "verdict": verdict,
        "reason": "too few grid points",
        "outside_domain": {"rows": 0, "coverage": None},
        "checked": 90,
        "rows": 100,
        "points": 12,
        "unit": "grid point",
        "min_shift": 0.05,
        "factor": 1.0,
        "false_alarm_bound": 0.01,
        "regions": [],
        "tests": [],
    }
    return {**doc, **over}


def _region(name: str, factor: float, axis: str = "n_decode", status: str = "drift") -> dict:
    grid = {"n_decode": [1, 8], "chunk": [64, 64]}
    return {"region": name, "factor": factor, "coverage": 0.9, "grid": grid, "axis": axis,
            "status": status}  # fmt: skip


def test_undecided_says_why_and_counts_rows_beyond_the_grid() -> None:
    out = {"rows": 7, "coverage": 0.5}
    text = _recommend(_doc("undecided", outside_domain=out))
    assert text.startswith("cannot decide (90 of 100 rows on 12 grid points checked)")
    assert ": too few grid points; 7 rows lie beyond the table's grid, 50.0% within" in text
    assert text.endswith("extend the calibration grid")


def test_valid_within_and_beyond_the_tolerance() -> None:
    within = _recommend(_doc("valid", factor=1.02))
    assert within == (
        "the table holds (90 of 100 rows on 12 grid points checked; median shift ×1.020, "
        "within ±5%; false-alarm bound 1%)"
    )
    beyond = _recommend(_doc("valid", factor=1.2, unit="grid box"))
    assert "beyond ±5% but on too few grid boxes past the tolerance" in beyond
    assert "measure more" in beyond


def test_drift_everywhere_is_the_whole_table() -> None:
    regions = [_region(f"r{i}", 1.3) for i in range(4)]
    tests = [{"test": "slowdown", "rejected": True}]
    text = _recommend(_doc("drift", factor=1.3, regions=regions, tests=tests))
    assert (
        text
        == "recalibrate the whole table: shift ×1.300 (90 of 100 rows on 12 grid points checked)"
    )
    only_tail = _recommend(_doc("drift", regions=[], tests=[{"test": "tail", "rejected": True}]))
    assert only_tail.startswith("recalibrate the whole table: the tail (")


def test_drift_in_some_regions_names_them_and_since_when() -> None:
    moved = [_region(f"r{i}", 1.3) for i in range(NAME_REGIONS + 2)]
    still = [_region(f"s{i}", 1.0, status="ok") for i in range(20)]
    since = _region("the second half", 1.3, axis="time")
    tests = [{"test": "slowdown", "rejected": True}]
    text = _recommend(_doc("drift", regions=[*moved, *still, since], tests=tests))
    assert text.startswith("recalibrate r0 (×1.300, 90.0% covered; grid n_decode 1-8, chunk 64)")
    assert f"r{NAME_REGIONS - 1} (" in text and f"r{NAME_REGIONS} (" not in text
    assert text.endswith(" and 2 more regions; it moved from the second half of the run on")
