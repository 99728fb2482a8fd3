"""--out that is not a regular file: a device or FIFO is written in place, a symbolic
link keeps pointing where it did; neither is ever replaced by the rename."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels import CostTable

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "samples_analytic.parquet"
AIC = ROOT / "tests" / "data" / "profiler" / "aiconfigurator"


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("special") / "t.json"
    r = runner.invoke(app, ["fit", str(EXAMPLE), "--out", str(out), "--family", "piecewise"])
    assert r.exit_code == 0, r.output
    return out


def is_char_device(path: str) -> bool:
    return stat.S_ISCHR(os.stat(path).st_mode)


def dev_listing() -> set[str]:
    return set(os.listdir("/dev"))


def test_fit_import_export_into_dev_null_leave_the_device(table: Path) -> None:
    before = dev_listing()
    fit = runner.invoke(app, ["fit", str(EXAMPLE), "--out", "/dev/null", "--family", "piecewise"])
    imported = runner.invoke(
        app, ["import", "aiconfigurator", str(AIC), "--model", "llama-3-8b", "--out", "/dev/null"]
    )
    exported = runner.invoke(app, ["export", str(table), "--format", "csv", "--out", "/dev/null"])
    for r in (fit, imported, exported):
        assert r.exit_code == 0, r.output
    assert is_char_device("/dev/null")
    assert dev_listing() == before  # no sidecar (fingerprint, provenance) beside it


def test_dev_full_is_one_line_exit_2_and_stays_a_device(table: Path) -> None:
    r = runner.invoke(app, ["export", str(table), "--format", "csv", "--out", "/dev/full"])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "No space" in lines[0]
    assert is_char_device("/dev/full")


def test_a_symlink_to_a_device_is_written_through(tmp_path: Path, table: Path) -> None:
    link = tmp_path / "out.csv"
    link.symlink_to("/dev/null")
    r = runner.invoke(app, ["export", str(table), "--format", "csv", "--out", str(link)])
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert is_char_device("/dev/null")


def test_a_symlink_to_a_file_keeps_pointing_there(tmp_path: Path, table: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    r = runner.invoke(app, ["fit", str(EXAMPLE), "--out", str(link), "--family", "piecewise"])
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert CostTable.load(real).model["kind"] == "piecewise"  # the file it names was replaced


def test_a_dangling_symlink_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "t.json"
    link.symlink_to(tmp_path / "nowhere" / "t.json")
    r = runner.invoke(app, ["fit", str(EXAMPLE), "--out", str(link), "--family", "piecewise"])
    assert r.exit_code == 2 and "symbolic link to nothing" in r.output
    assert link.is_symlink()


def test_a_fifo_is_written_in_place(tmp_path: Path, table: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    r = runner.invoke(app, ["export", str(table), "--format", "csv", "--out", str(fifo)])
    reader.join(timeout=60)
    assert r.exit_code == 0, r.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    lines = got[0].decode().splitlines() if got else []
    assert len(lines) > 1 and lines[0].count(",") == lines[1].count(",") > 0  # a whole CSV
