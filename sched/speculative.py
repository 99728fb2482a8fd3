"""Speculative decoding: a decode verifies ``k + 1`` tokens per step and keeps
``1 + accepted`` of them (docs/engine.md#speculative-decoding).

* **Pricing** (:class:`SpeculativePredictor`, :class:`SpeculativeExecutor`): a step
  whose ``n`` decodes each verify ``k`` draft tokens is priced as a step of
  ``n·(k+1)`` decode tokens on the cost table's existing ``n_decode`` axis (read as
  decode *tokens*), plus, when the drafter is a separate model with its own table,
  ``k`` draft passes of ``n`` decodes on that table. Old tables work unchanged.
* **Acceptance** (:func:`delivery_schedule`): draft ``j`` is accepted with
  probability ``accept[j]`` given drafts ``1..j-1`` were (one rate ``α``: every
  position ``α``, the i.i.d. model of Leviathan et al. 2023, ``E[tokens/step] =
  (1 − α^{k+1}) / (1 − α)``). A step delivers ``1 + accepted`` tokens (the target
  model's own token always comes out). The draws are a property of the request's
  text, not of the schedule, so each request's per-step deliveries are drawn once,
  from ``(seed, rid)``: every policy sees the same acceptance, and a run stays a pure
  function of spec and seed.
* **Engine** (:class:`SpeculativeRequest`): the engine's lazy streaks count *steps*;
  a request maps steps to delivered tokens through its drawn cumulative counts.
* **TPOT** (:func:`token_gaps`): a step that delivers ``m`` tokens after a gap ``g``
  counts ``m`` gaps of ``g / m``, so a request's mean gap is
  ``(last token − first token) / (tokens − 1)`` as vLLM's TPOT is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from servecal.sched.live import Clock, LiveRequest, Phase
from servecal.sched.request import Request

#: A salt so the acceptance streams differ from any other ``(seed, rid)`` stream.
_SALT = 0x5BEC


@dataclass(frozen=True)
class SpeculativeConfig:
    """``k`` draft tokens per decode step; ``accept``: the probability that draft
    position ``j`` (1-based) is accepted given all before it were — one value for
    every position or ``k`` values; ``draft``: a cost table JSON of the drafter when it
    is a separate model (``None``: drafting is free, as for n-gram or priced inside
    the target, MTP/EAGLE heads); ``seed``: the acceptance streams' seed (the run's)."""

    k: int
    accept: tuple[float, ...]
    draft: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError("--speculative k must be >= 1")
        if len(self.accept) not in (1, self.k):
            raise ValueError(f"--speculative accept needs 1 or k={self.k} probabilities")
        if not all(0.0 <= p <= 1.0 for p in self.accept):
            raise ValueError("--speculative accept probabilities must be in [0, 1]")

    @property
    def positions(self) -> np.ndarray:
        """The acceptance probability of each draft position, ``k`` values."""
        return np.resize(np.asarray(self.accept, dtype=float), self.k)

    def expected_tokens(self) -> float:
        """Expected tokens a (non-final) step delivers: ``1 + Σ_j Π_{i≤j} p_i``."""
        return 1.0 + float(np.cumprod(self.positions).sum())

    def seeded(self, seed: int) -> SpeculativeConfig:
        return replace(self, seed=seed)

    def text(self) -> str:
        """The flag's text back (``k=4,accept=0.7``)."""
        accept = "/".join(f"{p:g}" for p in self.accept)
        draft = f",draft={self.draft}" if self.draft else ""
        return f"k={self.k},accept={accept}{draft}"


def parse_speculative(text: str) -> SpeculativeConfig:
    """``k=4,accept=0.7`` or ``k=3,accept=0.9/0.8/0.6[,draft=TABLE.json]``."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("k", "accept", "draft"):
            raise ValueError(
                f"--speculative {text!r}: expected k=N,accept=P[/P...][,draft=TABLE.json]"
            )
        fields[key.strip()] = value.strip()
    if "k" not in fields or "accept" not in fields:
        raise ValueError(f"--speculative {text!r}: needs k=N and accept=P")
    try:
        k = int(fields["k"])
        accept = tuple(float(p) for p in fields["accept"].split("/"))
    except ValueError:
        raise ValueError(f"--speculative {text!r}: k is an integer, accept numbers") from None
    return SpeculativeConfig(k, accept, fields.get("draft") or None)


def delivery_schedule(config: SpeculativeConfig, rid: int, output_tokens: int) -> np.ndarray:
    """``cum[j]``: tokens delivered after ``j`` steps (``cum[0] = 0``, ``cum[1] = 1``:
    the prefill's token), clipped at ``output_tokens``; ends at the step that
    delivers the last token. Drawn from ``(seed, rid)`` alone."""
    rng = np.random.default_rng([config.seed, rid, _SALT])
    steps = max(output_tokens - 1, 0)  # enough steps even if nothing is accepted
    accepted = np.cumprod(rng.random((steps, config.k)) < config.positions, axis=1).sum(axis=1)
    cum = np.minimum(np.concatenate(([0, 1], 1 + np.cumsum(1 + accepted))), output_tokens)
    last = int(np.searchsorted(cum, output_tokens))
    return cum[: last + 1].astype(np.int64)


class SpeculativeRequest(LiveRequest):
    """A :class:`LiveRequest` whose steps deliver the drawn numbers of tokens.

    The engine's streak arithmetic runs on steps (``steps_out``, ``output_steps``);
    ``tokens_out`` and the KV are the delivered tokens."""

    __slots__ = ("_cum", "_steps")

    def __init__(self, request: Request, clock: Clock, config: SpeculativeConfig) -> None:
        super().__init__(request, clock)
        self._cum = delivery_schedule(config, request.rid, request.output_tokens)
        self._steps = len(self._cum) - 1

    @property
    def output_steps(self) -> int:
        return self._steps

    @property
    def tokens_out(self) -> int:
        return int(self._cum[self.steps_out])

    @property
    def kv_tokens(self) -> int:
        if self._phase == Phase.READY:  # the prompt and every token but the newest
            return self.request.prompt_tokens + self.tokens_out - 1
        return self._prefilled if self._phase == Phase.PREFILL else 0

    def finishes_in(self, idx: int) -> bool:
        return self._streaking and self._sync_iter + self._steps - self._tok == idx

    def recompute(self) -> None:
        super().recompute()
        self._target = self.request.prompt_tokens + int(self._cum[self._tok])

    def token_gaps(self, step_gaps: np.ndarray) -> np.ndarray:
        """Per-token gaps from the gaps between its steps: a step delivering ``m``
        tokens after ``g`` ms counts ``m`` gaps of ``g / m``."""
        if not step_gaps.size:
            return step_gaps
        m = np.diff(self._cum[1 : step_gaps.size + 2])
        return np.repeat(step_gaps / m, m)


class SpeculativePredictor:
    """A predictor pricing ``n`` decodes as ``n·(k+1)`` decode tokens (plus the drafter's
    ``k`` passes when it has a table): what SLOWeave's deadline chunk and every
    policy plan on. Everything else is the inner predictor's."""

    def __init__(self, inner: Any, config: SpeculativeConfig, draft: Any = None) -> None:
        self._inner = inner
        self._width = config.k + 1
        self._k = config.k
        self._draft = draft

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _draft_ms(self, n: Any, ctx: Any) -> Any:
        if self._draft is None:
            return 0.0
        return self._k * np.where(
            np.asarray(n) > 0, self._draft.predict(np.maximum(n, 1), 0, ctx, 0.0, q=0.5), 0.0
        )

    def predict(self, n: Any, c: Any, ctx: Any, prefix: Any, q: float = 0.5) -> Any:
        cost = self._inner.predict(np.multiply(n, self._width), c, ctx, prefix, q=q)
        if self._draft is None:
            return cost
        return cost + self._draft_ms(n, ctx)

    def margin(self, n: Any, c: Any, ctx: Any, prefix: Any) -> Any:
        return self._inner.margin(np.multiply(n, self._width), c, ctx, prefix)

    def max_chunk(
        self,
        n: int,
        ctx: float,
        prefix: int,
        budget: float,
        limit: int,
        q: float = 0.99,
        use_margin: bool = True,
    ) -> int:
        budget -= float(self._draft_ms(n, ctx))
        return self._inner.max_chunk(
            n * self._width, ctx, prefix, max(budget, 0.0), limit, q, use_margin
        )


class SpeculativeExecutor:
    """An executor running ``n`` decodes as ``n·(k+1)`` decode tokens, after the
    drafter's ``k`` passes (priced at its table's median) when it is a separate model."""

    def __init__(self, inner: Any, config: SpeculativeConfig, draft: Any = None) -> None:
        self._inner = inner.execute
        self._width = config.k + 1
        self._k = config.k
        self._draft = draft
        self.energy_source = inner.energy_source

    def execute(
        self, n_decode: int, chunk: int, ctx: float, prefix: float, now_ms: float
    ) -> tuple[float, float | None]:
        ms, energy = self._inner(n_decode * self._width, chunk, ctx, prefix, now_ms)
        if self._draft is not None and n_decode:
            ms += self._k * float(self._draft.predict(n_decode, 0, ctx, 0.0, q=0.5))
        return ms, energy


def load_draft(config: SpeculativeConfig) -> Any:
    """The drafter's cost table, or ``None``."""
    if config.draft is None:
        return None
    from servecal.costmodels.table import CostTable

    return CostTable.load(config.draft)
