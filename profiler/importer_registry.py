"""Importer names: ``servecal import KIND`` looks ``KIND`` up here.

An importer is a class (or any callable) that opens a per-operator profile::

    Importer(path, shape, tp, log, comm) -> OperatorSource

``path`` is the profile's folder or a file in it, ``shape`` the
:class:`~servecal.profiler.shapes.ModelShape`, ``tp`` the tensor-parallel degree,
``log`` an :class:`~servecal.profiler.importers.interp.ExtrapolationLog` it counts
reads beyond the profiled sizes in, ``comm`` the
:class:`~servecal.profiler.importers.collective.CommOptions`; the result answers the
per-layer operator times of :class:`~servecal.profiler.importers.compose.OperatorSource`,
which :func:`~servecal.profiler.importers.compose.compose` adds up into iteration
samples. ``KIND`` is a built-in name below or a user's ``module:Class``
(docs/plugins.md). Adding a built-in is one file and one line here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from servecal.plugins import Registry

if TYPE_CHECKING:
    from servecal.profiler.importers.collective import CommOptions
    from servecal.profiler.importers.compose import OperatorSource
    from servecal.profiler.importers.interp import ExtrapolationLog
    from servecal.profiler.shapes import ModelShape


class Importer(Protocol):
    """Opens one profile as an :class:`OperatorSource` (see the module docstring)."""

    def __call__(
        self,
        path: str | Path,
        shape: ModelShape,
        tp: int,
        log: ExtrapolationLog,
        comm: CommOptions | None = None,
    ) -> OperatorSource: ...


_I = "servecal.profiler.importers"
IMPORTERS = Registry(
    "importer",
    "servecal import",
    "Importer(path, shape, tp, log, comm) -> OperatorSource (docs/plugins.md)",
)
# fmt: off
IMPORTERS.add("aiconfigurator", f"{_I}.aiconfigurator:AiConfiguratorSource", "NVIDIA aiconfigurator's per-operator tables (GEMM, attention, all-reduce)")  # noqa: E501
IMPORTERS.add("vidur", f"{_I}.vidur:VidurSource", "Vidur's MLP and attention profiles (attention fitted linear in its features)")  # noqa: E501
# fmt: on
