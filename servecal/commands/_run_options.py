"""The run options ``simulate`` and ``compare`` share, each defined once.

A command takes them all as one value: decorate it with :func:`with_run_options` and
give it a ``run: RunOptions`` parameter; the decorator adds every field of
:class:`RunOptions` to the command's flags (name, default, help and range come from the
field) and hands the command the parsed values as one frozen :class:`RunOptions`.

To add a flag both commands take: add one field here (``_flag(default, help=...)``),
and, when it sets a :class:`~servecal.sched.experiment.RunSpec` field, one line in
:meth:`RunOptions.spec_fields`. Flags only one command takes stay in that command.

Not a command (names starting with ``_`` are skipped).
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import typer

from servecal.commands._common import (
    ALLOW_EDITED_HELP,
    ALLOW_MISMATCH_HELP,
    STRICT_HELP,
    table_trust,
)
from servecal.commands._runs import (
    FORCE_HELP,
    POWER_HELP,
    PREDICTOR_HELP,
    PREFIX_CACHE_HELP,
    SPECULATIVE_HELP,
    TRUTH_HELP,
)
from servecal.costmodels.provenance import TableTrust
from servecal.util.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])


def _flag(default: Any, *decls: str, **option: Any) -> Any:
    """A field whose command-line flag is ``typer.Option(default, *decls, **option)``."""
    return field(default=default, metadata={"option": typer.Option(default, *decls, **option)})


@dataclass(frozen=True)
class RunOptions:
    """What every run of ``simulate`` and ``compare`` takes from the command line."""

    setting: str = _flag(
        "colocated", help="colocated, or prefill: prefill-only instances, good = TTFT met."
    )
    seeds: int = _flag(5, min=1, help="Seeds 0..N-1.")
    requests: int = _flag(2000, help="Requests per run.")
    truth: str | None = _flag(None, help=TRUTH_HELP)
    predictor: str | None = _flag(None, help=PREDICTOR_HELP)
    power: str | None = _flag(None, help=POWER_HELP)
    kv_tokens: int = _flag(500_000, min=1, help="KV capacity M in tokens.")
    kv_memory_gb: float | None = _flag(
        None,
        "--kv-memory-gb",
        help="KV memory per GPU (10^9 bytes) instead of --kv-tokens: M at the model, KV dtype "
        "and TP the --predictor table records (an fp8 KV cache holds twice the tokens).",
    )
    prefix_cache: str = _flag("auto", "--prefix-cache", help=PREFIX_CACHE_HELP)
    speculative: str | None = _flag(None, "--speculative", help=SPECULATIVE_HELP)
    slo_classes: str | None = _flag(
        None, "--slo-classes", help="Stamp a workload's SLO classes on a trace, e.g. multislo."
    )
    granularity: str | None = _flag(None, help="Operator driver: layer|attn-mlp|fine.")
    scheduling: str | None = _flag(None, help="Operator driver: event|iteration wake-ups.")
    max_goodput: bool = _flag(
        False, "--max-goodput", help="Also search each (policy, seed)'s max goodput."
    )
    rate_range: str | None = _flag(
        None, help="With --max-goodput: LO:HI[:CAP] req/s to start from [default: 1:200]."
    )
    rate_tol: float = _flag(
        0.02, "--rate-tol", help="With --max-goodput: stop when the gap is below this share."
    )
    jobs: int | None = _flag(
        None,
        min=1,
        help="Runs at once: worker processes (compare --pool ray: Ray tasks) "
        "[default: all cores / the cluster's CPUs].",
    )
    strict: bool = _flag(False, "--strict", help=STRICT_HELP)
    allow_edited: bool = _flag(False, "--allow-edited", help=ALLOW_EDITED_HELP)
    allow_mismatch: bool = _flag(False, "--allow-mismatch", help=ALLOW_MISMATCH_HELP)
    force: bool = _flag(False, "--force", help=FORCE_HELP)

    @property
    def trust(self) -> TableTrust:
        """The table flags, as every loader of a cost table takes them."""
        return table_trust(self.allow_edited, self.strict, self.allow_mismatch)

    def bracket(self) -> Any:
        """The max-goodput search's starting bracket (``None`` without ``--max-goodput``)."""
        from servecal.sched.experiment import Bracket

        if (self.rate_range is not None or self.rate_tol != 0.02) and not self.max_goodput:
            raise InputError("--rate-range/--rate-tol apply with --max-goodput")
        if not self.max_goodput:
            return None
        return Bracket.parse(self.rate_range or "1:200", self.rate_tol)

    def driver(self) -> Any:
        """The operator driver's options when either of its flags was given, else ``None``."""
        from servecal.commands._runs import driver_options

        return driver_options(self.granularity, self.scheduling)

    def kv_capacity(self) -> int:
        """``M``: ``--kv-tokens``, or ``--kv-memory-gb`` over the bytes a token of the
        ``--predictor`` table's KV takes (:class:`~servecal.profiler.kvbudget.KVBudget`)."""
        if self.kv_memory_gb is None:
            return self.kv_tokens
        if self.kv_tokens != 500_000:
            raise InputError("give --kv-tokens or --kv-memory-gb, not both")
        from servecal.commands._runs import named
        from servecal.costmodels.table import CostTable
        from servecal.profiler.kvbudget import KVBudget
        from servecal.sched.experiment.models import table_path

        path = None if self.predictor is None else table_path(named("--predictor", self.predictor))
        if path is None:
            raise InputError(
                "--kv-memory-gb: needs a --predictor cost table (its fingerprint says the "
                "model and KV dtype), else --kv-tokens"
            )
        table = CostTable.load(path, trust=self.trust)
        return KVBudget.of_table(self.kv_memory_gb, table.fingerprint, str(path)).tokens

    def spec_fields(self) -> dict[str, Any]:
        """The :class:`~servecal.sched.experiment.RunSpec` fields these options set."""
        from servecal.commands._runs import named
        from servecal.sched import experiment as ex

        return {
            "setting": self.setting,
            "n_requests": self.requests,
            "seeds": tuple(range(self.seeds)),
            "truth": ex.DEFAULT_TRUTH if self.truth is None else named("--truth", self.truth),
            "predictor": ex.DEFAULT_PREDICTOR
            if self.predictor is None
            else named("--predictor", self.predictor),
            "power": self.power,
            "kv_capacity": self.kv_capacity(),
            "prefix_cache": self.prefix_cache,
            "speculative": self.speculative,
            "slo_classes": self.slo_classes,
            "trust": self.trust,
        }


def _flag_type(annotation: Any) -> Any:
    """``X`` for ``X | None`` (a flag's default None means "not given")."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return args[0] if is_union and len(args) == 1 else annotation


def _parameters() -> list[inspect.Parameter]:
    hints = typing.get_type_hints(RunOptions)
    return [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=f.metadata["option"],
            annotation=_flag_type(hints[f.name]),
        )
        for f in fields(RunOptions)
    ]


def with_run_options(fn: F) -> F:
    """Give the command ``fn`` (which has a ``run: RunOptions`` parameter) every flag of
    :class:`RunOptions`, after its own; it is called with them as one ``run`` value."""
    own = inspect.signature(fn, eval_str=True)
    names = [f.name for f in fields(RunOptions)]
    clash = [n for n in names if n in own.parameters]
    if clash or "run" not in own.parameters:
        raise TypeError(f"{fn.__name__}: needs a 'run' parameter and none of {clash}")

    @functools.wraps(fn)
    def command(**kwargs: Any) -> Any:
        shared = {name: kwargs.pop(name) for name in names}
        return fn(run=RunOptions(**shared), **kwargs)

    params = [p for p in own.parameters.values() if p.name != "run"]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
    command.__signature__ = own.replace(parameters=params + _parameters())  # type: ignore[attr-defined]
    return command  # type: ignore[return-value]
