"""The complete examples of docs/plugins.md, run as a user would: the ``python`` block of
a section written into a folder, and ``servecal`` run with that folder importable."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PLUGINS_DOC = Path(__file__).parents[1] / "docs" / "plugins.md"


def docs_example(heading: str, doc: Path = PLUGINS_DOC) -> str:
    """The first ``python`` block under ``## {heading}`` of ``doc``."""
    text = doc.read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ")[0]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, f"{doc.name}: no python block under '## {heading}'"
    return found.group(1)


def servecal(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m servecal ARGS`` in a fresh process that imports from ``folder``."""
    env = {**os.environ, "PYTHONPATH": str(folder)}
    return subprocess.run(
        [sys.executable, "-m", "servecal", *args], env=env, capture_output=True, text=True
    )
