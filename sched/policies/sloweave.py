"""SLOWeave (docs/spec.md §1): the largest prefill chunk that finishes before every decode deadline.

At scheduler time ``s`` with ready (decoding) requests ``A``:

* no prefill waiting → decode-only;
* ``A`` empty → no deadline binds: prefill ``min(C_max, L)`` of the oldest prompt;
* otherwise ``B = max(0, min_i d_i − s)`` with ``d_i = ℓ_i + D_i`` (``ℓ_i`` the last
  token's time; for a request whose prefill just finished, the prefill's completion,
  which is also when its first token came out), and
  ``c* = max{c ≤ min(C_max, L) : T̂_q(|A|, c) + δ(|A|, c) ≤ B}`` by the predictor's
  ``max_chunk`` (binary search). If not even ``c = 1`` fits, decode-only: decodes are
  never skipped.

``min_i d_i`` comes from the engine's deadline heaps in O(log |A|). Per-request
``D_i`` (heterogeneous SLOs) fall out of that minimum. Options (fields of
:class:`SLOWeaveConfig`, all off by default except the P99 + δ planning): aging with
SLO exceptions, admission control, multi-prefill first-fit.

Several chunks in one iteration are priced as one: the predictor is asked about the
total tokens, with the token-weighted mean prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from servecal.costmodels.predictor import PLAN_QUANTILE, Predictor
from servecal.sched.live import RequestView
from servecal.sched.plan import DECODE_ONLY, Plan
from servecal.sched.policies._common import room_for
from servecal.sched.policies.margin import Fit, MarginControl, Median
from servecal.sched.policies.miss_control import GapMissControl
from servecal.sched.policies.region_control import RegionMissControl
from servecal.sched.view import EngineView

#: ``margin_control`` values: the budget scaled online from the SLO's gap misses per
#: ``log2`` region of the chunk (the default), or one scale for every chunk, or the
#: whole budget planned on ``T̂_q + δ`` (the baseline the SLO control is measured
#: against).
REGION_CONTROL = "region"
SLO_CONTROL = "slo"
FIXED = "fixed"
MARGIN_CONTROLS = (REGION_CONTROL, SLO_CONTROL, FIXED)


@dataclass(frozen=True)
class SLOWeaveConfig:
    """SLOWeave's options; each is ``servecal simulate --opt KEY=VALUE``.

    * ``c_max`` (4096): largest chunk, ``C_max``.
    * ``quantile`` (0.99) and ``use_margin`` (True): plan on ``T̂_q + δ``. The P50-only
      variant of the margin experiment is ``quantile=0.5, use_margin=False``.
    * ``aging_ms`` (None = off): a prompt that has waited this long since arrival gets at
      least ``aging_chunk`` (256) tokens even if that breaks deadlines; the requests whose
      deadline it breaks are recorded as SLO exceptions.
    * ``admission`` (False): refuse a new arrival when the predicted decode-only cost with
      it admitted exceeds ``admission_fraction`` (0.9) of its ``D_i``.
    * ``multi_prefill`` (False): after the oldest prompt's whole remainder fits, fill the
      rest of the budget first-fit with the next prompts, up to ``max_prefills`` (8).
    * ``margin_control`` (``region``): ``slo`` scales the budget online so that the
      iterations filled to the deadline overshoot it no more often than the SLO affords
      (:mod:`~servecal.sched.policies.miss_control`; ``control_gain``,
      ``control_max_scale``, ``control_tpot_share`` are its options); ``region`` does
      so and corrects each ``log2`` region of the chunk by the table's error measured
      there, for a table wrong in some regions only
      (:mod:`~servecal.sched.policies.region_control`; ``control_region_max_scale``);
      ``fixed`` plans on ``T̂_q + δ`` against the whole budget (kept as the baseline
      the control is measured against).
    * ``control_hold_cliffs`` (True; ``region`` only): a prompt is left one token short
      rather than completed into a decode batch at or past a step of the table's
      error that no larger batch repays
      (:mod:`~servecal.sched.policies.decode_cliff`).
    """

    c_max: int = 4096
    quantile: float = PLAN_QUANTILE
    use_margin: bool = True
    aging_ms: float | None = None
    aging_chunk: int = 256
    admission: bool = False
    admission_fraction: float = 0.9
    multi_prefill: bool = False
    max_prefills: int = 8
    # ``region``: ≥ 0.98× the best fixed chunk on all 40 cells of the ten smooth and
    # replayed truths, as ``slo`` is, and far above it on coarse-grid replays
    # (docs/results/2026-12-04-robustness-full.md)
    margin_control: str = REGION_CONTROL
    control_gain: float = 0.05
    control_max_scale: float = 1.1
    control_region_max_scale: float = 1.5
    control_tpot_share: float = 0.5
    control_hold_cliffs: bool = True

    def __post_init__(self) -> None:
        if self.c_max < 1:
            raise ValueError("SLOWeaveConfig.c_max must be >= 1")
        if not 0.0 < self.quantile < 1.0:
            raise ValueError("SLOWeaveConfig.quantile must be in (0, 1)")
        if self.aging_ms is not None and not self.aging_ms >= 0:
            raise ValueError("SLOWeaveConfig.aging_ms must be >= 0 (or None: off)")
        if self.aging_chunk < 1:
            raise ValueError("SLOWeaveConfig.aging_chunk must be >= 1")
        if not 0.0 < self.admission_fraction <= 1.0:
            raise ValueError("SLOWeaveConfig.admission_fraction must be in (0, 1]")
        if self.max_prefills < 1:
            raise ValueError("SLOWeaveConfig.max_prefills must be >= 1")
        if self.margin_control not in MARGIN_CONTROLS:
            raise ValueError(
                f"SLOWeaveConfig.margin_control must be one of {', '.join(MARGIN_CONTROLS)}"
            )
        self.controller()  # checks the controller's options

    def controller(self) -> MarginControl | None:
        """A fresh margin controller for one run (``None`` for ``margin_control=fixed``)."""
        if self.margin_control == FIXED:
            return None
        try:
            if self.margin_control == REGION_CONTROL:
                return RegionMissControl(
                    tpot_share=self.control_tpot_share,
                    gain=self.control_gain,
                    max_scale=self.control_max_scale,
                    region_max_scale=self.control_region_max_scale,
                    hold_cliffs=self.control_hold_cliffs,
                )
            return GapMissControl(
                tpot_share=self.control_tpot_share,
                gain=self.control_gain,
                max_scale=self.control_max_scale,
            )
        except ValueError as exc:
            raise ValueError(f"SLOWeaveConfig: {exc}") from None


def deadline_chunk(
    predictor: Predictor,
    config: SLOWeaveConfig,
    n_decode: int,
    ctx: float,
    prefix: int,
    limit: int,
    now_ms: float,
    earliest_deadline_ms: float,
    waited_ms: float,
    scale: float = 1.0,
) -> tuple[int, float, bool]:
    """SLOWeave's decision for the oldest prompt, as a pure function of numbers.

    ``limit`` is the most tokens the prompt may get (``C_max``, its remainder and the
    KV room); ``waited_ms`` how long it has waited since arrival. Returns ``(chunk,
    budget_ms, aged)``: with no decode (``n_decode == 0``) no deadline binds and the
    chunk is ``limit`` (budget ``inf``); otherwise ``budget = max(0, min_i d_i − now)``
    and the chunk is the predictor's ``max_chunk`` on the configured quantile (and
    margin); ``aged`` is true when the aging rule raised it to ``aging_chunk``,
    knowingly breaking deadlines. The engine policy below and any other scheduler
    (a vLLM plug-in) call this one function, so they decide alike. ``scale`` multiplies
    the budget the chunk is fitted into (a margin controller's, :func:`controlled_chunk`);
    the returned ``budget_ms`` is the deadline's own.
    """
    if n_decode == 0:
        return limit, math.inf, False
    budget = max(0.0, earliest_deadline_ms - now_ms)
    # positional (q, use_margin): a call with keywords takes the interpreter's slow path
    c = predictor.max_chunk(
        n_decode, ctx, prefix, budget * scale, limit, config.quantile, config.use_margin
    )
    if _ages(config, c, limit, waited_ms):
        return min(config.aging_chunk, limit), budget, True
    return c, budget, False


def _ages(config: SLOWeaveConfig, chunk: int, limit: int, waited_ms: float) -> bool:
    """The aging rule: a prompt waiting ``aging_ms`` gets at least ``aging_chunk``."""
    return (
        chunk < config.aging_chunk
        and config.aging_ms is not None
        and waited_ms >= config.aging_ms
        and limit > chunk
    )


def controlled_chunk(
    control: MarginControl | None,
    predictor: Predictor,
    config: SLOWeaveConfig,
    n_decode: int,
    ctx: float,
    prefix: int,
    limit: int,
    now_ms: float,
    earliest_deadline_ms: float,
    waited_ms: float,
    remaining: int = 0,
) -> tuple[int, float, bool]:
    """:func:`deadline_chunk` under a margin controller (``None``: as it is).

    Scores the controller's last counted iteration against ``now_ms`` (when this
    decision is taken, the previous iteration has ended), lets it choose the chunk
    :func:`deadline_chunk` fits under its scale (or each region's: aging left out of
    that search, applied to what it found), and tells it of the chunk decided unless
    aging overrode it. ``remaining``: the prompt's prefill left (0: not known); a chunk
    that would complete it is cut one token short when the controller ``holds`` a
    batch of ``n_decode + 1`` decodes (:mod:`~servecal.sched.policies.decode_cliff`).
    A scheduler that keeps one controller per engine and calls this every step decides
    as the engine policy does (the vLLM plug-in: ``integrations/vllm/planner.py``).
    """
    if control is not None:
        control.settle(now_ms)
    if control is None or n_decode == 0:  # no controller, or no deadline binds
        return deadline_chunk(
            predictor, config, n_decode, ctx, prefix, limit, now_ms,
            earliest_deadline_ms, waited_ms,
        )  # fmt: skip

    budget = max(0.0, earliest_deadline_ms - now_ms)
    fit, median = _searches(predictor, config, n_decode, ctx, prefix, budget)
    c = control.choose(fit, limit, prefix, n_decode, ctx, median)
    if _ages(config, c, limit, waited_ms):
        return min(config.aging_chunk, limit), budget, True
    if 0 < remaining <= c and _holds(control, predictor, n_decode, ctx):
        c = remaining - 1
    if c > 0:
        control.count(earliest_deadline_ms, c, limit, now_ms, median)
    return c, budget, False


def _holds(control: MarginControl, predictor: Predictor, n_decode: int, ctx: float) -> bool:
    """Whether ``control`` keeps the batch from growing to ``n_decode + 1`` decodes."""

    def decode_ms(n: int) -> float:
        return float(predictor.predict(n, 0, ctx, 0, 0.5))

    return control.holds(n_decode + 1, decode_ms)


def _searches(
    predictor: Predictor, config: SLOWeaveConfig, n_decode: int, ctx: float, prefix: int,
    budget_ms: float,
) -> tuple[Fit, Median]:  # fmt: skip
    """One decision's questions to the table, for its margin controller: ``fit``,
    :func:`deadline_chunk`'s search with aging left out, and the table's median. (A
    function of its own: closures in :func:`controlled_chunk` would slow every call.)"""
    q, use_margin = config.quantile, config.use_margin

    def fit(top: int, scale: float) -> int:
        return predictor.max_chunk(n_decode, ctx, prefix, budget_ms * scale, top, q, use_margin)

    def median(chunk: int) -> float:
        return float(predictor.predict(n_decode, chunk, ctx, prefix, 0.5))

    return fit, median


class SLOWeave:
    """The SLOWeave policy: ``SLOWeave(config)`` or ``SLOWeave(**options)`` (the fields
    of :class:`SLOWeaveConfig`, as the policy registry builds it)."""

    def __init__(self, config: SLOWeaveConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise TypeError("SLOWeave takes a SLOWeaveConfig or its fields, not both")
        self.config = config or SLOWeaveConfig(**options)
        self.control = self.config.controller()

    def plan(self, view: EngineView, predictor: Predictor) -> Plan:
        # One function: called every iteration, it reads as SLOWeave's rule in order
        # (admission, the next prefill, its budgeted chunk, the aging exception, extra
        # prefills), each early return one case; a call per case is paid every iteration.
        cfg = self.config
        control = self.control
        if control is not None:
            control.settle(view.now_ms)  # whatever this decision turns out to be
            for rid in view.new_finished:
                control.finished(view.get(rid).output_tokens - 1)
        reject = self._admission(view, predictor) if cfg.admission else ()
        live = view.next_prefill()
        if live is not None and reject and live.rid in reject:
            live = next((x for x in view.prefill_queue() if x.rid not in reject), None)
        if live is None:
            return Plan(reject=reject) if reject else DECODE_ONLY
        n = view.n_decode
        limit = min(cfg.c_max, room_for(view, live))
        if n == 0:  # no deadline binds
            chunks = ((live.rid, limit),) if limit > 0 else ()
            if cfg.multi_prefill and chunks:
                chunks = self._fill(view, predictor, chunks, math.inf, reject)
            return Plan(prefill=chunks, reject=reject) if chunks or reject else DECODE_ONLY
        now = view.now_ms
        ctx = view.ctx_mean
        # positional: this runs every iteration (n_decode, ctx, prefix, limit, now_ms,
        # earliest_deadline_ms, waited_ms); the wait matters only to the aging rule
        waited = now - live.arrival_ms if cfg.aging_ms is not None else 0.0
        c, budget, aged = controlled_chunk(
            control, predictor, cfg, n, ctx, live.prefilled, limit, now,
            view.earliest_deadline_ms(), waited, live.remaining_prefill,
        )  # fmt: skip
        exceptions: tuple[int, ...] = ()
        if aged:
            exceptions = self._broken(view, predictor, n, c, ctx, live.prefilled)
        if c <= 0:
            return Plan(reject=reject, budget_ms=budget)
        chunks = ((live.rid, c),)
        if cfg.multi_prefill and c == live.remaining_prefill and not exceptions:
            scaled = budget if control is None else budget * control.scale()
            chunks = self._fill(view, predictor, chunks, scaled, reject)
        return Plan(prefill=chunks, reject=reject, exceptions=exceptions, budget_ms=budget)

    def _cost(self, p: Predictor, n: int, c: int, ctx: float, prefix: float) -> float:
        cost = p.predict(n, c, ctx, prefix, q=self.config.quantile)
        if self.config.use_margin:
            cost += p.margin(n, c, ctx, prefix)
        return float(cost)

    def _broken(
        self, view: EngineView, p: Predictor, n: int, c: int, ctx: float, prefix: int
    ) -> tuple[int, ...]:
        """Ready requests whose deadline an aged chunk ``c`` is predicted to break."""
        end = view.now_ms + self._cost(p, n, c, ctx, prefix)
        return tuple(r.rid for r in view.ready if r.deadline_ms < end)

    def _fill(
        self,
        view: EngineView,
        p: Predictor,
        chunks: tuple[tuple[int, int], ...],
        budget: float,
        reject: tuple[int, ...],
    ) -> tuple[tuple[int, int], ...]:
        """First-fit: add the next prompts while the total still fits the budget."""
        cfg = self.config
        planned = list(chunks)
        total = sum(c for _, c in planned)
        weighted = sum(view.get(rid).prefilled * c for rid, c in planned)
        names = {rid for rid, _ in planned} | set(reject)
        for live in view.prefill_queue():
            if len(planned) >= cfg.max_prefills or total >= cfg.c_max:
                break
            if live.rid in names:
                continue
            room = min(room_for(view, live, total), cfg.c_max - total)
            if room <= 0:
                break
            if math.isinf(budget):
                extra = room
            else:  # price the total; the new chunk's prefix weighs in at its full room
                prefix = (weighted + live.prefilled * room) / (total + room)
                fits = p.max_chunk(
                    view.n_decode,
                    view.ctx_mean,
                    int(prefix),
                    budget,
                    total + room,
                    q=cfg.quantile,
                    use_margin=cfg.use_margin,
                )
                extra = fits - total
            if extra <= 0:
                break
            planned.append((live.rid, extra))
            total += extra
            weighted += live.prefilled * extra
            if extra < live.remaining_prefill:
                break
        return tuple(planned)

    def _admission(self, view: EngineView, p: Predictor) -> tuple[int, ...]:
        """New arrivals refused because decoding them too would approach ``D_i``."""
        new = view.new_arrivals
        if not new:
            return ()
        n = len(view.running) + len(view.waiting) - len(new)
        refused = []
        for rid in new:
            live: RequestView = view.get(rid)
            cost = self._cost(p, n + 1, 0, view.ctx_mean, 0)
            if cost > self.config.admission_fraction * live.tpot_slo_ms:
                refused.append(rid)
            else:
                n += 1
        return tuple(refused)
