"""Fixtures shared by the report tests: synthetic runs and a calibration."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import reportkit  # noqa: E402


@pytest.fixture(scope="session")
def grid_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reportkit.write_grid(tmp_path_factory.mktemp("grid"), np.random.default_rng(1))


@pytest.fixture()
def calibration():
    return reportkit.calibration(np.random.default_rng(2))
