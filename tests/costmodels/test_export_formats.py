"""Exports for other servers: vllm-ascend's profile table and llm-d-sim's latency knobs.

Each format has a golden file (``tests/data/export/``, written from
``tablefactory.small_table()``; regenerate with ``SERVECAL_REGOLD=1``) and checks from
the consumer's side: the profile table through vllm-ascend 0.23's reader
(test_export_ascend.py), the knobs through llm-d-inference-sim's start-up checks
(test_export_llmd.py) and recovered here from a table that is exactly its model.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tablefactory import small_table
from typer.testing import CliRunner

from servecal.cli import app
from servecal.costmodels.export import export_table
from servecal.costmodels.export_llmd import fit_sim_profile
from servecal.costmodels.table import AXES, CostTable, Margin
from servecal.util.errors import InputError

GOLDEN = Path(__file__).parents[1] / "data" / "export"
runner = CliRunner()


def golden(tmp_path: Path, fmt: str, name: str) -> None:
    out = tmp_path / name
    export_table(small_table(), out, fmt, source="small_table")
    if os.environ.get("SERVECAL_REGOLD") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        (GOLDEN / name).write_bytes(out.read_bytes())
    assert out.read_text() == (GOLDEN / name).read_text()


def test_vllm_ascend_golden(tmp_path: Path) -> None:
    golden(tmp_path, "vllm-ascend", "small_table.vllm-ascend.csv")


def test_llm_d_sim_golden(tmp_path: Path) -> None:
    golden(tmp_path, "llm-d-sim", "small_table.llm-d-sim.yaml")


# -- vllm-ascend (its reader's own rules: test_export_ascend.py) -----------------------
def test_vllm_ascend_without_margin_writes_the_median(tmp_path: Path) -> None:
    t = small_table()
    only = CostTable(axes=t.axes, quantiles={0.5: t.values(0.5)}, fingerprint={})
    done = export_table(only, tmp_path / "p.csv", "vllm-ascend")
    assert "cost = P50" in done.notes[0]
    row = pd.read_csv(tmp_path / "p.csv").query("d_num == 8 and ctx_len == 1024 and p_len == 256")
    cost, p50 = row["cost"].item(), only.predict(8, 256, 1024, 0)
    assert p50 <= cost <= p50 + 1e-4  # rounded up


# -- llm-d-sim ------------------------------------------------------------------------------
def sim_model_table(itl=12.0, factor=2.5, overhead=30.0, per_token=0.25, m=64) -> CostTable:
    """A table that *is* the simulator's model (its decode and prefill slices)."""
    axes = {"n_decode": [0, 1, 8, 32, 64], "ctx": [0, 4096], "prefix": [0],
            "chunk": [0, 128, 512, 2048]}  # fmt: skip
    n, _, _, c = np.meshgrid(*(np.asarray(axes[a], dtype=float) for a in AXES), indexing="ij")
    decode = np.where(n > 0, itl * (1 + (factor - 1) * (n - 1) / (m - 1)), 0.0)
    p50 = decode + np.where(c > 0, overhead + per_token * c, 0.0) + 0.01
    return CostTable(axes, {0.5: p50, 0.99: p50 * 1.1}, Margin(0.99, 0.0, 0.99, None, 1, 1))


def test_llm_d_sim_recovers_the_simulators_own_model() -> None:
    p = fit_sim_profile(sim_model_table(), max_num_seqs=64)
    assert p.itl_ms == pytest.approx(12.01, rel=1e-9)
    assert p.load_factor == pytest.approx(1 + 1.5 * 12.0 / 12.01, rel=1e-9)
    assert p.prefill_overhead_ms == pytest.approx(30.01, rel=1e-9)
    assert p.prefill_per_token_ms == pytest.approx(0.25, rel=1e-9)
    assert p.decode_fit.max_rel < 1e-9 and p.prefill_fit.max_rel < 1e-9


def test_llm_d_sim_reports_a_bad_fit_honestly(tmp_path: Path) -> None:
    """A curved prefill cost: the fit's error is the table's distance from a line."""
    t = sim_model_table()
    p50 = t.values(0.5)
    p50 += np.asarray([0.0, 0.0, 20.0, 400.0])  # prefill cost bends upward with the chunk
    bent = CostTable(t.axes, {0.5: p50, 0.99: p50 * 1.1}, Margin(0.99, 0.0, 0.99, None, 1, 1))
    p = fit_sim_profile(bent, max_num_seqs=64)
    cs = np.asarray([128.0, 512.0, 2048.0])
    y = bent.lookup(0.5, np.zeros(3), cs, np.zeros(3), 0)[0]
    rel = (p.prefill_overhead_ms + p.prefill_per_token_ms * cs - y) / y
    assert p.prefill_fit.rms_rel == pytest.approx(np.sqrt(np.mean(rel**2)), rel=1e-9)
    assert p.prefill_fit.rms_rel > 0.05 and p.prefill_overhead_ms >= 0


def test_llm_d_sim_needs_a_grid_to_fit(tmp_path: Path) -> None:
    t = CostTable({"n_decode": [0, 4], "ctx": [0], "prefix": [0], "chunk": [0, 64]},
                  {0.5: np.arange(1.0, 5.0)})  # fmt: skip
    with pytest.raises(InputError, match="two n_decode values"):
        export_table(t, tmp_path / "x.yaml", "llm-d-sim")
    assert not (tmp_path / "x.yaml").exists()


def test_cli_prints_the_fit_error(tmp_path: Path) -> None:
    small_table().save(tmp_path / "t.json")
    out = tmp_path / "sim.yaml"
    r = runner.invoke(app, ["export", str(tmp_path / "t.json"), "--format", "llm-d-sim",
                            "--out", str(out), "--max-num-seqs", "64"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "decode fit" in r.output and "RMS error" in r.output
    assert "max-num-seqs: 64" in out.read_text()
    r = runner.invoke(app, ["export", str(tmp_path / "t.json"), "--format", "ascend",
                            "--out", str(out)])  # fmt: skip
    assert r.exit_code == 2 and "unknown format 'ascend'" in r.output
