"""What ``simulate`` and ``compare`` share: flags → run specs, progress bars, tables.

Not a command (names starting with ``_`` are skipped). rich is imported only when
something is drawn, so ``--json`` runs never load it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servecal.sched.experiment.models import (
    DEFAULT_PREDICTOR,
    DEFAULT_TRUTH,
    PREDICTORS,
    TRUTHS,
)
from servecal.util.errors import InputError

#: ``--truth`` / ``--predictor`` help: the names of the experiment layer's tables.
TRUTH_HELP = TRUTHS.usages() + f" [default: {DEFAULT_TRUTH}]."
PREDICTOR_HELP = (
    PREDICTORS.usages()
    + f" [default: {DEFAULT_PREDICTOR}; oracle warns: it is the truth's own formula]."
)
PREFIX_CACHE_HELP = (
    "auto|on|off: the engine's KV block cache of prompt prefixes (docs/prefix_cache.md); "
    "auto is on when the requests carry block ids (a Mooncake trace)."
)
POWER_HELP = (
    "Price every simulated iteration's energy with a power model: a100-llama3-8b or a "
    "JSON file (docs/energy.md); none: no energy [default: the truth's own]."
)
FORCE_HELP = (
    "Rerun and replace runs already in --out that another configuration wrote "
    "[default: resume the same runs, refuse others]."
)
SPECULATIVE_HELP = (
    "Speculative decoding: k=N draft tokens verified per decode step, accept=P (a rate) or "
    "P1/P2/.../Pk (per draft position), optionally draft=TABLE.json (a separate "
    "drafter's cost table); engine backend only (docs/engine.md) [default: off]."
)
POLICY_OPT_HELP = "A policy option KEY=VALUE (repeatable; `servecal policies` lists them)."


def split_list(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def checked(make: Callable[[], Any]) -> Any:
    """``make()``, with a bad value (``ValueError``) turned into one :class:`InputError`."""
    try:
        return make()
    except ValueError as exc:
        raise InputError(str(exc)) from None


def named(flag: str, value: str) -> str:
    """A ``--truth``/``--predictor`` value given on the command line: an empty one is a
    mistake (an unset shell variable), never the default."""
    if not value.strip():
        raise InputError(f"{flag} '': empty; leave the flag out for the default")
    return value.strip()


def driver_options(granularity: str | None, scheduling: str | None) -> Any:
    """The operator driver's options when either flag was given, else ``None``."""
    from servecal.sched.experiment import DriverOptions

    if granularity is None and scheduling is None:
        return None
    return checked(lambda: DriverOptions(granularity or "attn-mlp", scheduling or "event"))


def fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={fmt(v, 3)}" for k, v in value.items() if not isinstance(v, dict))
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def goodput_text(mean: dict[str, Any], cap: float | None = None) -> str:
    """``max_goodput`` as text: ``12.3 ± 0.4``, ``> CAP`` or ``< floor``."""
    value, bound = mean.get("max_goodput"), mean.get("max_goodput_bound")
    if value is None:
        return "-"
    if bound == "above_cap":
        return f"> {max(mean.get('max_goodput_per_seed') or [value]):g}"
    if bound == "below_floor":
        return "< floor"
    std = mean.get("max_goodput_std")
    return f"{value:.1f}" + ("" if not std else f" ± {std:.1f}")


class Bars:
    """One progress display on stderr with a bar per source: a sweep's runs, a torch
    run's tokens, a calibration's points. Nothing is drawn (and rich is not loaded)
    when ``quiet`` or stderr is not a terminal."""

    def __init__(self, quiet: bool = False) -> None:
        import sys

        self._on = not quiet and sys.stderr.isatty()
        self._bar: Any = None

    def __enter__(self) -> Bars:
        if self._on:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[extra]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def _task(self, label: str, total: int | None) -> Any:
        return self._bar.add_task(label, total=total, extra="")

    def sweep(self, label: str, total: int | None) -> Callable[[Any], None]:
        """For ``sweep(on_progress=...)``: runs done (of ``total``; unknown while
        max-goodput searches run)."""
        if self._bar is None:
            return lambda _: None
        task = self._task(label, total)
        return lambda p: self._bar.update(task, completed=p.done, total=p.total)

    def tokens(self, label: str) -> Callable[[Any], None]:
        """For torch runs (``on_run_progress``): tokens, live coverage and MAPE."""
        if self._bar is None:
            return lambda _: None
        task = self._task(f"{label} (tokens)", None)

        def update(p: Any) -> None:
            live = p.validation.line()
            if p.drift_state is not None:
                live += f" · drift {p.drift_state}"
            self._bar.update(task, completed=p.tokens_done, total=p.tokens_total, extra=live)

        return update

    def points(self) -> Callable[[Any], None]:
        """For the profiler's sweep (``SweepStatus``): points measured, budget left."""
        if self._bar is None:
            return lambda _: None
        task = None

        def update(status: Any) -> None:
            nonlocal task
            left = "no budget" if status.left_s is None else f"{status.left_s:.0f} s left"
            if task is None:
                task = self._task(status.label, status.planned)
            self._bar.update(
                task, description=status.label, completed=status.done, extra=f"points · {left}"
            )

        return update


def say(text: str) -> None:
    """One line on stderr, verbatim (file names are never wrapped or styled)."""
    import sys

    print(text, file=sys.stderr)


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A table on stdout (rich)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for k, col in enumerate(columns):
        table.add_column(col, justify="left" if k == 0 else "right")
    for r in rows:
        table.add_row(*r)
    Console().print(table)
