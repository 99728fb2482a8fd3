"""What a truth is: the ground truth a simulated run draws iteration times from.

A truth is made by a loader named in ``--truth`` (``NAME[:ARG]`` for a built-in,
``module:attr[:ARG]`` for a user's; :data:`~servecal.sched.experiment.models.TRUTHS`).
The one required method binds a seeded generator (and an optional drift to apply)
and returns an :class:`~servecal.sched.executor.Executor`; everything else is
optional and unlocks one feature:

* ``oracle()`` → a predictor that knows the truth's formula (``--predictor oracle``);
* ``describe()`` and ``draw(points, repeats, rng)`` → a description and a samples
  frame, so that ``--predictor fitted`` can fit a cost table on it.

A recipe with a complete example is in docs/plugins.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from servecal.costmodels.errors import InputError

if TYPE_CHECKING:
    import numpy as np

    from servecal.sched.executor import Executor
    from servecal.sched.truth import Drift


@runtime_checkable
class Truth(Protocol):
    """A simulated device: one executor per run (see the module docstring)."""

    def executor(self, rng: np.random.Generator, drift: Drift | None = None) -> Executor:
        """A fresh executor drawing from ``rng``; iterations that ``drift`` covers
        take ``drift.factor`` × as long (``drift.applies(n_decode, chunk, now_ms)``)."""
        ...


def check_truth(truth: Any, spec: str) -> None:
    """Refuse, in one line, what a user's loader returned if it is not a :class:`Truth`."""
    if not callable(getattr(truth, "executor", None)):
        raise InputError(
            f"--truth {spec}: the loader returned {type(truth).__name__}, which has no "
            "executor(rng, drift) method (docs/plugins.md)"
        )
