"""``--family auto``: keep the candidate whose out-of-fold quantiles score best.

Every candidate is cross-validated on the *same* folds (whole points held out, see
:mod:`crossval`), through the same compile step as the shipped table (grid, holes,
monotone projection, uncrossing), so its out-of-fold predictions are what its
table would have answered for points it never saw. Each is then scored by

    score = mean over the tabled quantiles q of the mean pinball loss (ms) of its
            out-of-fold q-predictions over every row

(a discretised CRPS: proper, so no candidate gains by hedging, and in ms, so it
weighs slow iterations by what a scheduler loses on them). The lowest score
wins, unless it is *tied*: a candidate whose score exceeds the best by less than
one standard error of the difference (paired over points, the unit the folds deal
out; the one-standard-error rule of Breiman et al.) or by less than
:data:`TIE_TOLERANCE` is as good as the best on this evidence, and among tied
candidates the one whose ``P_tail + δ`` is tightest (each with its own
cross-conformal margin) is kept: at equal accuracy, the tighter bound leaves a
scheduler more of its budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Relative score difference under which two candidates always count as tied.
TIE_TOLERANCE = 0.005


@dataclass(frozen=True)
class Trial:
    """One candidate's cross-validation: its held-out metrics (as :func:`evaluate`
    computes them, on out-of-fold predictions) and the seconds it took, or why it
    was not scored (``skipped``)."""

    name: str
    seconds: float
    metrics: Mapping[str, Any] | None = None
    skipped: str | None = None
    #: Per point: its rows' pinball loss, averaged over the quantiles, summed over
    #: the rows and divided by all rows (so the entries sum to :attr:`score`).
    point_loss: np.ndarray | None = None

    @property
    def score(self) -> float | None:
        """Mean over quantiles of the out-of-fold pinball loss (ms); None if skipped."""
        if self.metrics is None:
            return None
        losses = list(self.metrics["pinball"].values())
        return sum(losses) / len(losses)


#: How the rule reads in the table's ``model.selection.rule`` and ``fit``'s output.
RULE = (
    "lowest mean out-of-fold pinball loss over the quantiles; candidates within one "
    f"standard error (paired over points) or {TIE_TOLERANCE:.1%} of it are tied and the "
    "tightest P_tail+δ among them is kept"
)


def paired_gap(trial: Trial, best: Trial) -> tuple[float, float]:
    """How much worse ``trial`` scores than ``best``, and the standard error of that
    difference over points (each point's rows move together, so points are the
    independent units)."""
    d = trial.point_loss - best.point_loss
    gap = float(d.sum())
    p = d.size
    se = float(np.sqrt(p / (p - 1) * np.sum((d - gap / p) ** 2))) if p > 1 else 0.0
    return gap, se


def choose(trials: Sequence[Trial], tie: float = TIE_TOLERANCE) -> tuple[str, str]:
    """The kept candidate and a sentence saying why (see the module docstring)."""
    scored = [t for t in trials if t.score is not None]
    if not scored:
        raise ValueError("no candidate could be scored")
    best = min(scored, key=lambda t: t.score)
    tied = _tied(scored, best, tie)
    with_tightness = [t for t in tied if t.metrics["tightness"] is not None]
    kept = min(with_tightness, key=lambda t: t.metrics["tightness"]) if with_tightness else best
    return kept.name, _reason(trials, scored, best, kept, tied)


def _tied(scored: Sequence[Trial], best: Trial, tie: float) -> list[Trial]:
    """The candidates whose loss is within a standard error (paired over points when
    known) or ``tie`` of the best's."""
    tied = []
    for t in scored:
        gap, se = paired_gap(t, best) if t.point_loss is not None else (t.score - best.score, 0)
        if gap <= max(se, tie * best.score):
            tied.append(t)
    return tied


def _reason(
    trials: Sequence[Trial], scored: Sequence[Trial], best: Trial, kept: Trial, tied: list[Trial]
) -> str:
    """Why ``kept``: the lowest loss, or tied with it and tightest; then the others'
    scores and the skipped candidates."""
    others = sorted((t for t in scored if t is not kept), key=lambda t: t.score)
    versus = ", ".join(f"{t.name} {t.score:.4g} ({_rel(t.score, kept.score)})" for t in others)
    reason = (
        f"lowest out-of-fold pinball loss, mean over quantiles: {kept.name} {kept.score:.4g} ms"
    )
    if kept is not best:
        reason = (
            f"as good as the lowest out-of-fold pinball loss ({best.name} {best.score:.4g} ms, "
            f"{kept.name} {kept.score:.4g} ms: tied) and tightest "
            f"P_tail+δ ({kept.metrics['tightness']:.2%} vs {best.metrics['tightness']:.2%})"
        )
    elif len(tied) > 1:
        reason += " (tied candidates: " + ", ".join(t.name for t in tied if t is not best)
        reason += "; it is also the tightest)"
    if versus:
        reason += f"; others: {versus}"
    skipped = [f"{t.name} ({t.skipped})" for t in trials if t.skipped]
    if skipped:
        reason += "; skipped: " + ", ".join(skipped)
    return reason


def _rel(value: float, ref: float) -> str:
    return f"{value / ref - 1.0:+.1%}" if ref > 0 else "n/a"


def trial_record(trial: Trial) -> dict[str, Any]:
    """One candidate as the table's ``model.selection.candidates`` lists it (JSON-able)."""
    record: dict[str, Any] = {"name": trial.name, "fit_s": round(trial.seconds, 3)}
    if trial.metrics is None:
        record["skipped"] = trial.skipped
        return record
    m = trial.metrics
    record.update(
        score=trial.score,
        pinball={repr(q): v for q, v in m["pinball"].items()},
        p50_mape=m["p50_mape"],
        p99_coverage=m["p99_coverage"],
        tightness=m["tightness"],
    )
    return record
