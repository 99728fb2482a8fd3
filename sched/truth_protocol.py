"""What a truth is: the ground truth a simulated run draws iteration times from.

A truth is made by a loader named in ``--truth`` (``NAME[:ARG]`` for a built-in,
``module:attr[:ARG]`` for a user's; :data:`~servecal.sched.experiment.models.TRUTHS`).
The one required method binds a seeded generator and returns an
:class:`~servecal.sched.executor.Executor` of the truth's step cost. A run's
``--drift`` is not the truth's business: the loader wraps the executor in
:func:`~servecal.sched.truth.with_drift`, the one place drift is applied (built-in
truths too), so a truth written outside the project drifts exactly as a built-in.
Everything else is optional and unlocks one feature:

* ``oracle()`` → a predictor that knows the truth's formula (``--predictor oracle``);
* ``describe()`` and ``draw(points, repeats, rng)`` → a description and a samples
  frame, so that ``--predictor fitted`` can fit a cost table on it.

A recipe with a complete example is in docs/plugins.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from servecal.util.errors import InputError

if TYPE_CHECKING:
    import numpy as np

    from servecal.sched.executor import Executor
    from servecal.sched.truth import Drift


@runtime_checkable
class Truth(Protocol):
    """A simulated device: one executor per run (see the module docstring)."""

    def executor(self, rng: np.random.Generator) -> Executor:
        """A fresh executor drawing from ``rng`` (drift is applied around it)."""
        ...


def check_truth(truth: Any, spec: str) -> GuardedTruth:
    """A user's truth, guarded: refused in one line if it is not a :class:`Truth`, and
    whatever its executor raises or returns wrong is one line naming it."""
    if not callable(getattr(truth, "executor", None)):
        raise InputError(
            f"--truth {spec}: the loader returned {type(truth).__name__}, which has no "
            "executor(rng) method (docs/plugins.md)"
        )
    return GuardedTruth(truth, spec)


def _failed(spec: str, what: str, exc: BaseException | str) -> InputError:
    why = exc if isinstance(exc, str) else f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return InputError(f"--truth {spec}: {what}: {why}")


class GuardedTruth:
    """A user's truth behind one-line errors, its executor drifted when a run asks;
    every other attribute is the truth's own (``oracle``, ``describe``, ``draw``, ...)."""

    def __init__(self, truth: Any, spec: str) -> None:
        self._truth, self._spec = truth, spec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._truth, name)

    def executor(self, rng: np.random.Generator, drift: Drift | None = None) -> Executor:
        """The user's executor, guarded, then slowed by ``drift`` as a built-in's is
        (:func:`~servecal.sched.truth.with_drift`)."""
        from servecal.sched.truth import with_drift

        try:
            inner = self._truth.executor(rng)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code, any failure
            raise _failed(self._spec, "executor", exc) from None
        if not callable(getattr(inner, "execute", None)):
            raise _failed(self._spec, "executor", f"{type(inner).__name__} has no execute()")
        return with_drift(GuardedExecutor(inner, self._spec), drift)


class GuardedExecutor:
    """A user's executor: a failed or malformed ``execute`` is one line naming the truth."""

    def __init__(self, inner: Any, spec: str) -> None:
        self._inner, self._spec = inner, spec
        self.energy_source = str(getattr(inner, "energy_source", "none"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def execute(
        self, n_decode: int, chunk: int, ctx: float, prefix: float, now_ms: float
    ) -> tuple[float, float | None]:
        try:
            ms, energy = self._inner.execute(n_decode, chunk, ctx, prefix, now_ms)
            ms = float(ms)
            energy = None if energy is None else float(energy)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code, any failure
            raise _failed(self._spec, "execute", exc) from None
        if not 0 < ms < float("inf"):
            raise _failed(self._spec, "execute", f"returned a duration of {ms!r} ms")
        return ms, energy
