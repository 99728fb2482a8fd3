"""The whole page: parses, embeds every figure, has HTML tables, and a Markdown twin."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from reporthtml import check

from servecal.reports import discover
from servecal.reports.loading import ReportInputs
from servecal.reports.page import sections, write_pages


@pytest.fixture(scope="module")
def page(grid_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    import numpy as np
    import reportkit

    inputs = discover([grid_dir])
    inputs = ReportInputs(inputs.runs, (reportkit.calibration(np.random.default_rng(5)),))
    out = tmp_path_factory.mktemp("out")
    secs = sections(inputs, preface=["How the targets were chosen."])
    return secs, write_pages(secs, out, "test report", ["meta line"])


def test_html_parses_and_embeds_every_figure(page) -> None:
    secs, files = page
    text = files.html.read_text(encoding="utf-8")
    parsed = check(text)
    assert parsed.errors == [] and parsed.stack == []
    n_figures = sum(len(s.figures) for s in secs)
    assert len(parsed.images) == n_figures > 10
    for src in parsed.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG")
    assert parsed.external == []  # no script, no stylesheet link, no network fetch


def test_html_has_real_tables_and_every_section(page) -> None:
    secs, files = page
    parsed = check(files.html.read_text(encoding="utf-8"))
    # the short answer opens the page, before the setup and the detail
    assert parsed.section_ids == ["answer", "setup", "calibration", "scheduling", "energy", "drift"]
    n_tables = sum(len(s.tables) for s in secs)
    assert parsed.tables == n_tables > 8
    assert "SLOWeave" in parsed.cells and "goodput (req/s)" in parsed.cells


def test_the_answer_figure_comes_right_under_the_title_and_tables_scroll_inside(page) -> None:
    """What a 1280 px window needs (tests/reports/test_layout.py measures it in a real
    browser where one is installed): the answer's figure first, every table in a
    wrapper that scrolls by itself, images no wider than the page."""
    _, files = page
    text = files.html.read_text(encoding="utf-8")
    parsed = check(text)
    assert parsed.main_children[:3] == [("h1", ""), ("section", "answer"), ("nav", "")]
    assert parsed.section_first["answer"] == "figure"
    assert parsed.table_parents and set(parsed.table_parents) == {"scroll"}
    assert ".scroll{overflow-x:auto;max-width:100%}" in text
    assert "img{max-width:100%;" in text


def test_markdown_summary_has_the_tables(page) -> None:
    _, files = page
    md = files.markdown.read_text(encoding="utf-8")
    for heading in ("## Answer", "## Calibration", "## Scheduling", "## Energy", "## Drift"):
        assert heading in md
    assert "| workload | policy | goodput (req/s) |" in md
    assert "*Figure: Predicted vs measured*" in md


def test_no_temporary_files_left(page) -> None:
    _, files = page
    assert sorted(p.name for p in files.html.parent.iterdir()) == ["report.html", "report.md"]
