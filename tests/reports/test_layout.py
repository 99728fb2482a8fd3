"""The page in a real browser at 1280 px: nothing overflows sideways, the answer's
figure is on the first screen, and its table fits without scrolling.

Needs a headless Chromium (Debian: ``apt-get install chromium-headless-shell``; the
``chromium`` package works too). Without one the test skips on a developer's machine
and fails in CI (``CI`` set), so the layout is never silently untested there.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from layoutkit import WIDTH, find_browser, measure, run_browser
from reportkit import search, write_run

from servecal.reports import discover
from servecal.reports.page import write_report

#: How the demo names its SLOWeave runs: the label that used to widen every table.
SLOWEAVE = "sloweave[aging_chunk=32,aging_ms=564.0,c_max=512]"


def _browser() -> str:
    found = find_browser()
    if found:
        return found
    message = "no headless Chromium (apt-get install chromium-headless-shell)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}: CI must measure the report's layout")
    pytest.skip(message)


@pytest.fixture(scope="module")
def demo_like_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Searched runs shaped like the demo's: four workloads, three targets, the demo's
    policy names with SLOWeave's options, two seeds."""
    root = tmp_path_factory.mktemp("runs")
    rng = np.random.default_rng(11)
    config = {"truth": "samples:calibration/samples.parquet",
              "predictor": "table:calibration/costtable.json", "rate": 8.0}  # fmt: skip
    rates = (2.0, 8.0, 32.0, 128.0)
    for tpot in (35.6, 76.9, 146.0):
        for w, base in (("chat", 30.0), ("mixed", 20.0), ("long", 5.0), ("bursty", 12.0)):
            for k, policy in enumerate(("fixed-32", "fixed-128", "full", SLOWEAVE)):
                for seed in range(2):
                    cap = base * (1 + 0.2 * k) * (1 + 0.1 * seed) * tpot / 35.6
                    write_run(root / f"{tpot}-{w}-{k}-{seed}", rng, policy, w, tpot, seed,
                              config=config, search=search(cap, rates))  # fmt: skip
    out = tmp_path_factory.mktemp("report")
    return write_report(discover([root]), out, title="servecal demo report").html


def test_nothing_overflows_sideways_at_1280_px(demo_like_page: Path, tmp_path: Path) -> None:
    browser = _browser()
    layout = measure(browser, demo_like_page)
    assert layout["inner"] == WIDTH
    assert layout["page"] <= WIDTH, layout  # no horizontal scrollbar on the page
    assert layout["wide"] == [], layout
    assert layout["scrolled"] == [], layout  # no table needs scrolling sideways either
    assert layout["answerTable"] is not None and layout["figureTop"] is not None, layout
    width, visible = layout["answerTable"]
    assert width <= visible, layout  # the answer's table fits: no scrolling inside it
    assert layout["figureTop"] < 300 and layout["figureRight"] <= WIDTH, layout
    shot = tmp_path / "page.png"
    run_browser(browser, f"--screenshot={shot}", demo_like_page.as_uri())
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG") and int.from_bytes(png[16:20], "big") == WIDTH
