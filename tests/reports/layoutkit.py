"""Measure a report page's layout in headless Chromium (used by test_layout.py).

    PYTHONPATH=tests/reports python -m layoutkit REPORT.html [...]

prints, per page, the window width, the page's scroll width, the answer table's
content and box widths, every table wrapper that scrolls sideways, and where the
answer's figure sits: the numbers docs/results/2026-12-02-demo-report.md quotes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
WIDTH = 1280

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


def find_browser() -> str | None:
    """The first headless Chromium on PATH, or ``None``."""
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def run_browser(browser: str, *args: str) -> str:
    """Chromium's stdout for ``args`` in a WIDTH px window (it must exit 0)."""
    done = subprocess.run(
        [browser, "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={WIDTH},900", "--virtual-time-budget=10000", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{browser} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def measure(browser: str, page: Path) -> dict:
    """The layout of ``page`` as MEASURE reports it."""
    with tempfile.TemporaryDirectory() as tmp:
        measured = Path(tmp) / "measured.html"
        measured.write_text(
            page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>")
        )
        dom = run_browser(browser, "--dump-dom", measured.as_uri())
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom, re.S)
    if not found:
        raise RuntimeError("the measuring script did not run")
    return json.loads(found.group(1).replace("&quot;", '"'))


if __name__ == "__main__":
    chromium = find_browser()
    if chromium is None:
        sys.exit("error: no headless Chromium (apt-get install chromium-headless-shell)")
    for arg in sys.argv[1:]:
        print(arg, json.dumps(measure(chromium, Path(arg))))
