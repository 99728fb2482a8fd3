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
    assert "sloweave" in parsed.cells and "goodput (req/s)" in parsed.cells


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
