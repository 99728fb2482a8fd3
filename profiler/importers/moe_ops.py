"""A MoE layer's experts and all-to-all from aiconfigurator's ``moe`` tables (docs/profiler.md).

Two CSVs in the import folder (``scripts/aiconfigurator_moe_slice.py`` writes them
from the ``aiconfigurator-core`` package):

* ``*moe_perf*``: the fused MoE operator (router top-k, expert GEMMs, un-permute) per
  layer, ms, by ``num_tokens`` at the shape's ``hidden_size, inter_size, topk,
  num_experts`` and ``moe_ep_size``, MoE-TP 1, for routing ``distribution`` balanced
  and ``power_law_1.01`` / ``power_law_1.2``;
* ``*moe_a2a_perf*``: DeepEP's all-to-all (``dispatch`` and ``combine``, µs) at EP 8,
  low-latency kernels (``deepep_ll``, up to 256 tokens a rank) and high-throughput
  ones (``deepep_ht``).

How a step of ``T`` tokens on one rank is priced (each read recorded in provenance):

* expert parallelism is vLLM's DP attention + EP experts: each of the ``ep`` ranks
  runs its own batch, and the step priced is one rank's with every rank running a
  step like it, so the MoE operator is read at ``num_tokens = T·ep`` (the tokens all
  ranks route), at ``moe_ep_size = ep``;
* ``routing_skew`` ``s`` reads the distribution ``power_law_s``: 0 balanced,
  linear between the profiled 0 (balanced), 1.01 and 1.2, clamped above 1.2;
* the all-to-all (``ep > 1``; 0 at EP 1): dispatch + combine at an equivalent token
  count: ``T × (hidden / profiled hidden) × (min(top_k, ep) / min(profiled top_k,
  8)) × ((ep − 1)/ep) / (7/8)`` — the bytes one rank sends, relative to the profiled
  shape at EP 8 (a token goes to at most ``min(top_k, ep)`` ranks, ``(ep − 1)/ep`` of
  them remote); low-latency kernels for a decode-only step within their 256 tokens,
  high-throughput ones otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from servecal.profiler.importers.csvfile import read_profile_csv
from servecal.profiler.importers.interp import ExtrapolationLog, Series
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

MOE_COLUMNS = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
               "moe_tp_size", "moe_ep_size", "distribution", "latency")  # fmt: skip
A2A_COLUMNS = ("comm_backend", "phase", "ep_size", "hidden_size", "topk", "num_tokens", "latency")
#: Profiled power-law exponents of the routing distributions (0: balanced).
DISTRIBUTIONS = {0.0: "balanced", 1.01: "power_law_1.01", 1.2: "power_law_1.2"}
A2A_EP = 8  # the EP size DeepEP's all-to-all was profiled at
LOW_LATENCY_MAX_TOKENS = 256


def _one(folder: Path, pattern: str, columns: tuple[str, ...]) -> pd.DataFrame:
    matches = sorted(folder.glob(pattern))
    if len(matches) != 1:
        raise InputError(
            f"{folder}: a MoE shape needs one {pattern} file (scripts/aiconfigurator_moe_slice.py"
            f" writes it), found {len(matches)}"
        )
    return read_profile_csv(matches[0], columns)


class MoEOperators:
    """The experts and all-to-all of one MoE layer of ``shape`` (ms per layer)."""

    def __init__(self, folder: Path, shape: ModelShape, log: ExtrapolationLog) -> None:
        self.shape, self.log, self.folder = shape, log, folder
        moe = _one(folder, "*moe_perf*.csv", MOE_COLUMNS)
        rows = moe[
            (moe["hidden_size"] == shape.hidden)
            & (moe["inter_size"] == shape.expert_intermediate)
            & (moe["topk"] == shape.top_k)
            & (moe["num_experts"] == shape.experts)
            & (moe["moe_tp_size"] == 1)
            & (moe["moe_ep_size"] == shape.ep)
        ]
        self._experts: dict[float, Series] = {}
        for skew, name in DISTRIBUTIONS.items():
            part = rows[rows["distribution"] == name]
            if not part.empty:
                self._experts[skew] = Series.from_pairs(part["num_tokens"], part["latency"])
        if 0.0 not in self._experts:
            raise InputError(
                f"{folder}: no balanced moe rows for {shape.name} ({shape.moe_label}); the "
                "table has its hidden, expert width, top-k, experts and EP only as profiled"
            )
        self._a2a: dict[tuple[str, str], Series] = {}
        self.a2a_note = "none: EP 1"
        if shape.ep > 1:
            self._read_a2a(_one(folder, "*moe_a2a_perf*.csv", A2A_COLUMNS))

    def _read_a2a(self, a2a: pd.DataFrame) -> None:
        a2a = a2a[a2a["ep_size"] == A2A_EP]
        hiddens = sorted(a2a["hidden_size"].unique(), key=lambda h: abs(h - self.shape.hidden))
        a2a = a2a[a2a["hidden_size"] == hiddens[0]]
        topks = sorted(a2a["topk"].unique(), key=lambda k: abs(k - self.shape.top_k))
        a2a = a2a[a2a["topk"] == topks[0]]
        for (backend, phase), part in a2a.groupby(["comm_backend", "phase"]):
            if backend in ("deepep_ll", "deepep_ht"):
                us = Series.from_pairs(part["num_tokens"], part["latency"])
                self._a2a[(str(backend), str(phase))] = Series(us.xs, [y / 1000 for y in us.ys])
        if len(self._a2a) != 4:
            raise InputError(f"{self.folder}: moe_a2a needs deepep_ll and deepep_ht rows")
        s = self.shape
        self._a2a_scale = (
            (s.hidden / hiddens[0])
            * (min(s.top_k, s.ep) / min(topks[0], A2A_EP))
            * ((s.ep - 1) / s.ep)
            / ((A2A_EP - 1) / A2A_EP)
        )
        self.a2a_note = (
            f"DeepEP dispatch + combine profiled at EP {A2A_EP}, hidden {hiddens[0]}, "
            f"top-{topks[0]}; read at {self._a2a_scale:.3g}x the rank's tokens "
            "(bytes sent relative to it)"
        )

    def experts_ms(self, tokens: int) -> float:
        """The MoE operator of one layer for a rank's ``tokens`` (every rank alike)."""
        routed = tokens * self.shape.ep
        skews = sorted(self._experts)
        s = min(self.shape.routing_skew, skews[-1])
        lo = max(k for k in skews if k <= s)
        hi = min((k for k in skews if k >= s), default=lo)
        t_lo = self._experts[lo].at(routed, self.log)
        if hi == lo:
            return t_lo
        w = (s - lo) / (hi - lo)
        return (1 - w) * t_lo + w * self._experts[hi].at(routed, self.log)

    def all_to_all_ms(self, tokens: int, decode_only: bool) -> float:
        """Dispatch + combine of one layer (0 at EP 1)."""
        if self.shape.ep == 1 or tokens <= 0:
            return 0.0
        equivalent = tokens * self._a2a_scale
        low = decode_only and equivalent <= LOW_LATENCY_MAX_TOKENS
        backend = "deepep_ll" if low else "deepep_ht"
        phases = ("dispatch", "combine")
        return sum(self._a2a[(backend, p)].at(equivalent, self.log) for p in phases)

    def provenance(self) -> dict[str, Any]:
        skew = self.shape.routing_skew
        return {
            "moe": self.shape.moe_label,
            "moe_experts": "aiconfigurator moe operator (vLLM fused MoE) per layer, read at "
            f"num_tokens = tokens x EP {self.shape.ep}; routing "
            + ("balanced" if not skew else f"power law {skew:g} (linear between profiled)"),
            "moe_all_to_all": self.a2a_note,
        }
