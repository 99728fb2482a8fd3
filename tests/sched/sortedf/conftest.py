"""Shared helpers for the Sorted-F tests (no test reads ../shared: data is in tests/data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from servecal.sched.sortedf.model import Instance

DATA = Path(__file__).resolve().parents[2] / "data" / "sortedf"


def instance_from(draw_s, draw_o, memory_slack: int) -> Instance:
    s = np.asarray(draw_s, dtype=np.int64)
    o = np.asarray(draw_o, dtype=np.int64)
    return Instance(s, o, int((s + o).max()) + memory_slack)


@pytest.fixture
def data_dir() -> Path:
    return DATA
