"""An exporter written outside the project runs by import path (docs/plugins.md).

The exporter is the example printed in docs/plugins.md, written to a folder put on
PYTHONPATH and run through the real ``servecal export`` entry point.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tablefactory import small_table
from userplugins import docs_example, servecal

from servecal.costmodels.export import long_form, provenance_path

NAME = "p50_lines:p50_lines"


@pytest.fixture(scope="module")
def user_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    code = docs_example("An exporter")
    assert "def p50_lines" in code and "Rendered(" in code
    folder = tmp_path_factory.mktemp("user")
    (folder / "p50_lines.py").write_text(code, encoding="utf-8")
    (folder / "broken.py").write_text("def export(table, options):\n    return 'not bytes'\n")
    small_table().save(folder / "table.json")
    return folder


def test_an_exporter_loads_by_import_path(user_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "p50.jsonl"
    res = servecal(user_path, "export", str(user_path / "table.json"), "--format", NAME,
                   "--out", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    frame = long_form(small_table())
    lines = out.read_text().splitlines()
    assert res.stdout.splitlines()[0] == f"wrote {len(frame)} lines to {out}"
    assert "P50s of table.json" in res.stdout
    cells = [json.loads(line) for line in lines]
    assert [c["p50_ms"] for c in cells] == pytest.approx(frame["p50"].tolist())
    assert provenance_path(out).is_file()  # written beside it like every format


def test_an_exporter_that_returns_no_rendered_is_one_line(user_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.txt"
    res = servecal(user_path, "export", str(user_path / "table.json"), "--format",
                   "broken:export", "--out", str(out))  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: --format broken:export: the exporter returned str, not a Rendered"
    ]
    assert not out.exists()
