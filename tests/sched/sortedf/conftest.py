"""Shared fixtures for the Sorted-F tests (every test's data is in tests/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "data" / "sortedf"


@pytest.fixture
def data_dir() -> Path:
    return DATA
