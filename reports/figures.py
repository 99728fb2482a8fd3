"""matplotlib on the Agg backend: figures to PNG bytes, with a shared look.

Only this module touches matplotlib's global state; sections ask it for a figure
and give it back to :func:`to_png`, which closes it (no figure leaks across a long
report).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # no display, no network: the report must render anywhere

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure as MplFigure  # noqa: E402

DPI = 90
#: Colours cycled per policy so one policy keeps its colour across figures.
PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)


def new_figure(nrows: int = 1, ncols: int = 1, width: float = 6.0, height: float = 3.6):
    """A figure with ``nrows × ncols`` axes (always a 2-D array of axes)."""
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, dpi=DPI
    )
    # Fixed margins instead of tight_layout: laying out tick labels is most of the
    # rendering time of a many-panel figure, and these margins fit our labels.
    fig.subplots_adjust(
        left=0.9 / (width * ncols),
        right=1 - 0.25 / (width * ncols),
        bottom=0.75 / (height * nrows),
        top=1 - 0.4 / (height * nrows),
        wspace=0.9 / width,
        hspace=1.1 / height,
    )
    return fig, axes


def to_png(fig: MplFigure) -> bytes:
    """Encode and close the figure."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=DPI)
    finally:
        plt.close(fig)
    return buf.getvalue()


def colour_map(names: Sequence[str]) -> dict[str, str]:
    """A stable colour per name (sorted, so the same set gets the same colours)."""
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(sorted(set(names)))}


def ecdf(ax: Axes, values: np.ndarray, label: str, colour: str) -> None:
    """Empirical CDF of ``values`` (finite ones) as a step line."""
    v = np.sort(np.asarray(values, dtype=float))
    v = v[np.isfinite(v)]
    if v.size == 0:
        return
    y = np.arange(1, v.size + 1) / v.size
    ax.step(v, y, where="post", label=label, color=colour, linewidth=1.4)


def log_axis(ax: Axes, which: str = "x") -> None:
    """Log scale with major ticks only (minor log ticks cost more than they tell)."""
    from matplotlib.ticker import NullLocator

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis.set_minor_locator(NullLocator())


def empty_note(ax: Axes, text: str) -> None:
    """Say on the axes why there is nothing to plot (instead of a blank box)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#57606a")
    ax.set_xticks([])
    ax.set_yticks([])
