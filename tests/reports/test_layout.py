"""The page in a real browser at 1280 px: nothing overflows sideways, the answer's
figure is on the first screen, and its table fits without scrolling.

Needs a headless Chromium (Debian: ``apt-get install chromium-headless-shell``; the
``chromium`` package works too). Without one the test skips on a developer's machine
and fails in CI (``CI`` set), so the layout is never silently untested there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from reportkit import search, write_run

from servecal.reports import discover
from servecal.reports.page import write_report

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
WIDTH = 1280
#: How the demo names its SLOWeave runs: the label that used to widen every table.
SLOWEAVE = "sloweave[aging_chunk=32,aging_ms=564.0,c_max=512]"

#: Run in the page once it has laid out; the result goes into the DOM that
#: --dump-dom prints.
MEASURE = """<script>
window.addEventListener('load', () => {
  const answer = document.querySelector('#answer');
  const table = answer.querySelector('.scroll');
  const figure = answer.querySelector('figure');
  const out = {
    inner: window.innerWidth,
    page: document.documentElement.scrollWidth,
    answerTable: table && [table.scrollWidth, table.clientWidth],
    figureTop: figure && figure.getBoundingClientRect().top,
    figureRight: figure && figure.querySelector('img').getBoundingClientRect().right,
    scrolled: [...document.querySelectorAll('.scroll')]
      .filter(e => e.scrollWidth > e.clientWidth)
      .map(e => [e.previousElementSibling.textContent, e.scrollWidth]),
    wide: [...document.querySelectorAll('main > *, main > section > *')]
      .filter(e => e.getBoundingClientRect().right > window.innerWidth)
      .map(e => e.tagName + (e.id ? '#' + e.id : '')),
  };
  const pre = document.createElement('pre');
  pre.id = 'layout';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    message = "no headless Chromium (apt-get install chromium-headless-shell)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}: CI must measure the report's layout")
    pytest.skip(message)


def _run(browser: str, *args: str) -> str:
    done = subprocess.run(
        [browser, "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={WIDTH},900", "--virtual-time-budget=10000", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


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
    page = tmp_path / "measured.html"
    page.write_text(demo_like_page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = _run(browser, "--dump-dom", page.as_uri())
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom, re.S)
    assert found, "the measuring script did not run"
    layout = json.loads(found.group(1).replace("&quot;", '"'))
    assert layout["inner"] == WIDTH
    assert layout["page"] <= WIDTH, layout  # no horizontal scrollbar on the page
    assert layout["wide"] == [], layout
    assert layout["scrolled"] == [], layout  # no table needs scrolling sideways either
    assert layout["answerTable"] is not None and layout["figureTop"] is not None, layout
    width, visible = layout["answerTable"]
    assert width <= visible, layout  # the answer's table fits: no scrolling inside it
    assert layout["figureTop"] < 300 and layout["figureRight"] <= WIDTH, layout
    shot = tmp_path / "page.png"
    _run(browser, f"--screenshot={shot}", demo_like_page.as_uri())
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG") and int.from_bytes(png[16:20], "big") == WIDTH
