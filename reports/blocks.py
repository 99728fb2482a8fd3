"""The pieces a report section is made of: text, tables and figures.

Sections build these plain values; :mod:`servecal.reports.render` turns them into
HTML and Markdown. Keeping content and rendering apart lets tests check what a
section says without parsing HTML, and keeps each section module about its data.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Text:
    """A paragraph of plain text (escaped on rendering)."""

    text: str


@dataclass(frozen=True)
class Table:
    """A table rendered as a real HTML ``<table>`` (copyable), and as Markdown."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""
    #: False for key/value tables of mostly words: every cell left-aligned.
    numeric: bool = True

    def __post_init__(self) -> None:
        if not self.columns:
            raise ValueError(f"table {self.title!r} has no columns")
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(
                    f"table {self.title!r}: row {i} has {len(row)} cells, "
                    f"expected {len(self.columns)}"
                )


@dataclass(frozen=True)
class Figure:
    """A matplotlib figure already encoded as PNG bytes."""

    title: str
    png: bytes
    caption: str = ""

    def __post_init__(self) -> None:
        if not self.png.startswith(b"\x89PNG"):
            raise ValueError(f"figure {self.title!r} is not a PNG")


Block = Text | Table | Figure


@dataclass(frozen=True)
class Section:
    """One titled part of the report (Calibration, Scheduling, Energy, Drift)."""

    key: str
    title: str
    blocks: tuple[Block, ...] = field(default_factory=tuple)

    @property
    def figures(self) -> tuple[Figure, ...]:
        return tuple(b for b in self.blocks if isinstance(b, Figure))

    @property
    def tables(self) -> tuple[Table, ...]:
        return tuple(b for b in self.blocks if isinstance(b, Table))


def fmt(value: float | int | None, digits: int = 3) -> str:
    """A number for a table cell: ``digits`` significant digits, '—' for missing."""
    if value is None:
        return "—"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if v != v:  # NaN
        return "—"
    if v in (float("inf"), float("-inf")):
        return "∞" if v > 0 else "-∞"
    if isinstance(value, numbers.Integral):
        return f"{int(v):,}"
    return f"{v:.{digits}g}" if abs(v) < 10**digits else f"{v:,.0f}"


def pct(value: float | None, digits: int = 1) -> str:
    """A fraction as a percentage cell."""
    if value is None or value != value:
        return "—"
    return f"{100.0 * float(value):.{digits}f}%"
