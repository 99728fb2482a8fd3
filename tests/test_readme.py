"""The README's Python example runs as written (a newcomer copies it first)."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_python_example_runs(capsys) -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "the README has one Python example"
    here = os.getcwd()
    os.chdir(ROOT)  # the example names a shipped table by its path in the repository
    try:
        exec(compile(blocks[0], "README.md", "exec"), {})
    finally:
        os.chdir(here)
    p99_ms, chunk, attainment = (float(x) for x in capsys.readouterr().out.split())
    assert p99_ms > 0 and 1 <= chunk <= 4096 and 0.0 <= attainment <= 1.0
