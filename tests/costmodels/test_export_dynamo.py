"""``servecal export --format dynamo-mocker``: NVIDIA Dynamo's mocker reads the file
and answers with the table's P50.

With the mocker's own virtualenv (``SERVECAL_DYNAMO_PYTHON=$(bash scripts/dynamo_env.sh)``:
ai-dynamo 1.6.1 and its Rust engine ai-dynamo-runtime 1.6.1, no GPU; its own virtualenv
because ai-dynamo registers pytest and vLLM plugins), the mocker's own
``is_mocker_format_npz`` accepts the file and its offline replay serves requests with it
(``dynamo_driver.py`` runs them there); without it those tests skip (they fail in CI,
``CI`` set) and the file is read the way the mocker's source reads it
(``consumer_dynamo.py``, which names the file it follows).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from consumer_dynamo import MockerModel
from tablefactory import small_table
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.export import export_table
from servecal.costmodels.table import CostTable
from servecal.util.errors import InputError

H100 = Path(__file__).parents[2] / "sched" / "data" / "imported_h100x1" / "table.json"
DRIVER = Path(__file__).with_name("dynamo_driver.py")
runner = CliRunner()


def mocker(*args: object) -> dict:
    """The mocker's own answer (``dynamo_driver.py`` in its virtualenv); skips without
    it, fails in CI."""
    python = os.environ.get("SERVECAL_DYNAMO_PYTHON")
    if not python:
        if os.environ.get("CI"):
            raise RuntimeError("CI needs SERVECAL_DYNAMO_PYTHON (scripts/dynamo_env.sh)")
        pytest.skip("no Dynamo mocker: SERVECAL_DYNAMO_PYTHON=$(bash scripts/dynamo_env.sh)")
    done = subprocess.run([python, str(DRIVER), *map(str, args)], capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def h100_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mocker") / "perf_data.npz"
    export_table(CostTable.load(H100), out, "dynamo-mocker")
    return out


@pytest.mark.parametrize("which", ["h100", "small"])
def test_the_mockers_reading_is_the_tables_p50(which: str, tmp_path: Path) -> None:
    """Through the mocker's interpolation rules: a prefill alone is the table's P50 of
    that chunk, a decode batch ``n`` at mean context ``ctx`` (read at ``(n·ctx, ctx)``)
    within 2 % of the table's P50, over random shapes inside the table's grid."""
    table = CostTable.load(H100) if which == "h100" else small_table()
    out = tmp_path / "perf_data.npz"
    export_table(table, out, "dynamo-mocker")
    model = MockerModel(out)
    rng = np.random.default_rng(7)
    chunks = [c for c in table.axes["chunk"] if c > 0]
    for isl in rng.integers(chunks[0], chunks[-1] + 1, 200):
        want = float(table.lookup(0.5, 0, isl, table.axes["ctx"][0], 0)[0])
        assert model.prefill_ms(1, int(isl)) == pytest.approx(want, rel=1e-9)
    batches = [n for n in table.axes["n_decode"] if n > 0]
    contexts = [c for c in table.axes["ctx"] if c > 0]
    worst = 0.0
    for n, ctx in zip(rng.integers(batches[0], batches[-1] + 1, 500),
                      rng.uniform(contexts[0], contexts[-1], 500), strict=True):  # fmt: skip
        want = float(table.lookup(0.5, n, 0, ctx, 0)[0])
        worst = max(worst, abs(model.decode_ms(int(n), n * ctx, ctx) / want - 1))
    assert worst < 0.02


def test_the_mockers_own_check_takes_the_file(h100_npz: Path) -> None:
    assert mocker("check", h100_npz) == {"mocker_format": True}


@pytest.mark.parametrize(("isl", "osl", "requests"), [(1024, 32, 1), (512, 32, 8), (256, 32, 32)])
def test_the_mocker_serves_requests_with_the_tables_latencies(
    h100_npz: Path, isl: int, osl: int, requests: int
) -> None:
    """All prompts are prefilled in one step (``requests · isl`` tokens, within the
    mocker's 8,192-token step), then decoded together: the mocker's TTFT is the table's
    P50 of that chunk and its ITL the table's P50 of the batch at the mean context."""
    table = CostTable.load(H100)
    got = mocker("replay", h100_npz, isl, osl, requests)
    assert got["completed_requests"] == requests
    ttft = float(table.lookup(0.5, 0, isl * requests, 0, 0)[0])
    itl = float(table.lookup(0.5, requests, 0, isl + osl / 2, 0)[0])
    assert got["mean_ttft_ms"] == pytest.approx(ttft, rel=0.01)
    assert got["mean_itl_ms"] == pytest.approx(itl, rel=0.02)


@pytest.mark.parametrize(
    ("axes", "match"),
    [
        ({"n_decode": [0, 4], "ctx": [0, 512], "prefix": [0], "chunk": [0]}, "no chunk >= 1"),
        ({"n_decode": [0], "ctx": [0, 512], "prefix": [0], "chunk": [0, 64]}, "no n_decode >= 1"),
        ({"n_decode": [0, 4], "ctx": [0], "prefix": [0], "chunk": [0, 64]}, "no ctx >= 1"),
    ],
)
def test_a_table_that_cannot_fill_the_grid_is_one_line(
    axes: dict, match: str, tmp_path: Path
) -> None:
    shape = [len(axes[a]) for a in ("n_decode", "ctx", "prefix", "chunk")]
    table = CostTable(axes, {0.5: np.full(shape, 5.0)})
    table.save(tmp_path / "t.json")
    out = tmp_path / "perf_data.npz"
    result = runner.invoke(app, ["export", str(tmp_path / "t.json"), "--format",
                                 "dynamo-mocker", "--out", str(out)])  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0]
    assert not out.exists()


def test_a_non_positive_p50_and_a_wrong_suffix_are_refused(tmp_path: Path) -> None:
    """(A saved table with such cells is refused when it is loaded; one built in memory
    reaches the exporter.)"""
    axes = {"n_decode": [0, 4], "ctx": [0, 512], "prefix": [0], "chunk": [0, 64]}
    with pytest.raises(InputError, match="not a positive number"):
        export_table(CostTable(axes, {0.5: np.zeros((2, 2, 1, 2))}), tmp_path / "p.npz",
                     "dynamo-mocker")  # fmt: skip
    assert not (tmp_path / "p.npz").exists()
    small_table().save(tmp_path / "t.json")
    out = tmp_path / "perf_data.bin"
    result = runner.invoke(app, ["export", str(tmp_path / "t.json"), "--format",
                                 "dynamo-mocker", "--out", str(out)])  # fmt: skip
    assert result.exit_code == 2 and "named *.npz" in result.output, result.output
    assert not out.exists()
