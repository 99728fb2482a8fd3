"""Bad input is one line naming the file (and column); discovery searches folders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from reportkit import write_run

from servecal.reports.loading import discover, energy_source_name, load_run
from servecal.util.errors import InputError


def test_discovery_finds_nested_runs(grid_dir: Path) -> None:
    inputs = discover([grid_dir])
    assert len(inputs.runs) == 24 and not inputs.calibrations
    assert {r.policy for r in inputs.runs} == {"fixed-256", "full", "sloweave"}


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "requests.parquet").unlink(), "no requests.parquet"),
        (lambda d: (d / "run.json").write_text("{nope"), "not valid JSON"),
        (lambda d: (d / "iterations.parquet").write_bytes(b"PAR1junk"), "not a readable Parquet"),
        (
            lambda d: (
                pd.read_parquet(d / "requests.parquet")
                .drop(columns=["first_token_ms"])
                .to_parquet(d / "requests.parquet")
            ),
            "missing column 'first_token_ms'",
        ),
        (lambda d: (d / "run.json").write_text(json.dumps({"config": []})), "'config' must be"),
    ],
)
def test_bad_run_folder_is_one_line(tmp_path: Path, damage, message: str) -> None:
    folder = write_run(tmp_path / "r", np.random.default_rng(0), "full", "chat", 25.0, 0)
    damage(folder)
    with pytest.raises(InputError) as err:
        discover([tmp_path]) if message.startswith("no ") else load_run(folder)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_missing_and_empty_paths(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        discover([tmp_path / "absent"])
    with pytest.raises(InputError, match="no run"):
        discover([tmp_path])


def test_summary_filled_in_by_the_metrics_module_when_absent(tmp_path: Path) -> None:
    folder = write_run(tmp_path / "r", np.random.default_rng(0), "full", "chat", 25.0, 0)
    info = json.loads((folder / "run.json").read_text())
    expected = info.pop("summary")
    (folder / "run.json").write_text(json.dumps(info))
    assert load_run(folder).summary["goodput"] == pytest.approx(expected["goodput"])


def test_energy_source_wording() -> None:
    assert energy_source_name("nvml") == "NVML"
    assert energy_source_name({"source": "rapl"}) == "RAPL"
    assert energy_source_name("table") == "estimated from the cost table's energy column"
    assert energy_source_name(None) == "unavailable"
