"""Operator times from aiconfigurator's per-layer tables (ms per layer; see docs/profiler.md).

A folder (or any file in it) holding three CSVs: ``*gemm_perf*`` (``m, n, k,
latency``), ``*context_attention_perf*`` (prefill attention without prefix:
``batch_size, isl``) and ``*generation_attention_perf*`` (decode attention:
``batch_size, step`` = KV length), both per ``num_heads, num_key_value_heads,
head_dim``. Reads between profiled sizes are linear (bilinear over GEMM ``n, k``;
linear over ``m``, batch, step and length); beyond them, proportional (prefill
attention: as the square of the length, the causal work).

What the tables lack and how it is handled (recorded in provenance):
* prefill with a cached prefix: read at the prompt length with the same causal
  attention work, ``L = sqrt(c² + 2·c·p)`` (``c·p + c²/2`` score entries);
* query heads between two profiled counts (same KV heads, head size): attention read
  linearly between them;
* embedding lookup: not profiled, 0;
* norms, rotary, activation, residual adds and the KV-cache write: priced from bytes
  moved over the device's bandwidth plus a per-kernel launch cost
  (:mod:`~servecal.profiler.importers.pointwise`), or 0 with ``pointwise=False``.

At TP > 1 the GEMMs and attention are each GPU's share, and the all-reduces come
from the folder's ``*custom_allreduce*.csv`` (vLLM's all-reduce, CUDA-graph and
eager backends; see :mod:`~servecal.profiler.importers.collective`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from servecal.profiler.importers import collective
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.csvfile import read_profile_csv
from servecal.profiler.importers.interp import ExtrapolationLog, Series, bracket
from servecal.profiler.importers.moe_ops import MoEOperators
from servecal.profiler.importers.pointwise import PointwiseModel, device_key
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

KINDS = {
    "gemm": ("*gemm_perf*.csv", ("m", "n", "k", "latency")),
    "context": ("*context_attention_perf*.csv", ("batch_size", "isl", "latency")),
    "generation": ("*generation_attention_perf*.csv", ("batch_size", "step", "latency")),
}
HEAD_COLUMNS = ("num_heads", "num_key_value_heads", "head_dim")


#: Column naming each table's dtype, and what a table without it holds.
DTYPE_COLUMNS = {"gemm": "gemm_dtype", "context": "kv_cache_dtype", "generation": "kv_cache_dtype"}
DEFAULT_DTYPE = "bfloat16"


def _of_dtype(frame: pd.DataFrame, folder: Path, kind: str, dtype: str) -> pd.DataFrame:
    """The rows of ``dtype`` (weights for GEMMs, the KV cache for attention); a table
    without the dtype column is bf16. One line when the profile has no such rows."""
    column = DTYPE_COLUMNS[kind]
    have = sorted(str(d) for d in frame[column].unique()) if column in frame else [DEFAULT_DTYPE]
    if dtype not in have:
        what = "weight" if kind == "gemm" else "KV-cache"
        raise InputError(
            f"{folder}: no {dtype} {kind} rows for the {what} dtype (profiled: {', '.join(have)})"
        )
    return frame[frame[column] == dtype] if column in frame else frame


def _find(folder: Path, kind: str) -> pd.DataFrame:
    pattern, needed = KINDS[kind]
    matches = sorted(folder.glob(pattern))
    if len(matches) != 1:
        found = "none" if not matches else ", ".join(m.name for m in matches)
        raise InputError(f"{folder}: expected one {pattern} file for {kind} times, found {found}")
    needed = needed + (HEAD_COLUMNS if kind != "gemm" else ())
    return read_profile_csv(matches[0], needed)


class AiConfiguratorSource:
    """Per-layer operator times of ``shape`` at tensor-parallel degree ``tp``."""

    name = "aiconfigurator"

    def __init__(
        self,
        path: str | Path,
        shape: ModelShape,
        tp: int,
        log: ExtrapolationLog,
        comm: CommOptions | None = None,
        pointwise: bool = True,
        pointwise_device: str | None = None,
        qk_norm: bool = False,
        weight_dtype: str = DEFAULT_DTYPE,
        kv_dtype: str = DEFAULT_DTYPE,
    ) -> None:
        folder = Path(path)
        folder = folder if folder.is_dir() else folder.parent
        if shape.n_heads % tp or shape.intermediate % tp or shape.vocab % tp:
            raise InputError(f"--tp {tp}: must divide {shape.name}'s heads, MLP width and vocab")
        self.folder, self.shape, self.tp, self.log = folder, shape, tp, log
        self.heads = shape.n_heads // tp
        self.head_notes: list[str] = []
        self.kv_heads = max(1, shape.n_kv_heads // tp)  # KV heads are replicated below 1/GPU
        self.collective = collective.open_collective(
            collective.read_aiconfigurator, folder, tp, comm or CommOptions()
        )
        self.weight_dtype, self.kv_dtype = weight_dtype, kv_dtype
        gemm = _of_dtype(_find(folder, "gemm"), folder, "gemm", weight_dtype)
        self._read_gemm(gemm)
        self._read_attention(kv_dtype)
        self.device = str(gemm["device"].iloc[0]) if "device" in gemm.columns else None
        # a MoE shape's MLP: the router GEMM and the moe operator (importers/moe_ops.py)
        self.moe = MoEOperators(folder, shape, log) if shape.is_moe else None
        self.pointwise: PointwiseModel | None = None
        if pointwise:
            name = pointwise_device or self.device
            if name is None:
                raise InputError(
                    f"{folder}: the GEMM table names no device; pass --pointwise-device "
                    "(or --no-pointwise)"
                )
            self.pointwise = PointwiseModel(shape, tp, device_key(name), qk_norm=qk_norm)

    def _read_gemm(self, gemm: pd.DataFrame) -> None:
        """One series over ``m`` per profiled ``(n, k)``, spikes dropped and counted."""
        self._gemm, self.spikes = {}, 0
        for (n, k), g in gemm.groupby(["n", "k"]):
            series, dropped = Series.from_pairs(g["m"], g["latency"]).without_spikes()
            self._gemm[(float(n), float(k))] = series
            self.spikes += dropped
        self._ns = sorted({n for n, _ in self._gemm})
        self._ks = sorted({k for _, k in self._gemm})

    def _read_attention(self, kv_dtype: str) -> None:
        """Decode attention per step (context), prefill attention at batch 1, for this
        model's heads per GPU and the KV dtype."""
        folder = self.folder
        gen = _of_dtype(_find(folder, "generation"), folder, "generation", kv_dtype)
        gen = self._heads_rows(gen, "generation")
        self._gen = {
            float(s): Series.from_pairs(g["batch_size"], g["latency"])
            for s, g in gen.groupby("step")
        }
        self._steps = sorted(self._gen)
        ctx = _of_dtype(_find(folder, "context"), folder, "context", kv_dtype)
        ctx = self._heads_rows(ctx, "context")
        ctx = ctx[ctx["batch_size"] == 1]
        if ctx.empty:
            raise InputError(f"{folder}: no context-attention rows with batch_size 1")
        self._prefill = Series.from_pairs(ctx["isl"], ctx["latency"])

    def _heads_rows(self, frame: pd.DataFrame, kind: str) -> pd.DataFrame:
        """Rows for this model's heads per GPU; between two profiled query-head counts
        (same KV heads and head size), latencies read linearly between them."""
        hd = self.shape.head_dim
        same = frame[(frame["num_key_value_heads"] == self.kv_heads) & (frame["head_dim"] == hd)]
        rows = same[same["num_heads"] == self.heads]
        if not rows.empty:
            return rows
        counts = sorted(int(h) for h in same["num_heads"].unique())
        lower = [h for h in counts if h < self.heads]
        upper = [h for h in counts if h > self.heads]
        if not lower or not upper:
            raise InputError(
                f"{self.folder}: no {kind}-attention rows for heads={self.heads}, "
                f"kv_heads={self.kv_heads}, head_dim={hd} ({self.shape.name} at TP {self.tp})"
            )
        lo, hi = lower[-1], upper[0]
        keys = ["batch_size", "step"] if kind == "generation" else ["batch_size", "isl"]
        a = same[same["num_heads"] == lo][[*keys, "latency"]]
        b = same[same["num_heads"] == hi][[*keys, "latency"]]
        both = a.merge(b, on=keys, suffixes=("_lo", "_hi"))
        w = (self.heads - lo) / (hi - lo)
        both["latency"] = (1 - w) * both["latency_lo"] + w * both["latency_hi"]
        self.head_notes.append(
            f"{kind} attention for {self.heads} query heads read linearly between the "
            f"profiled {lo} and {hi}"
        )
        return both[[*keys, "latency"]]

    def gemm_ms(self, m: float, n: float, k: float) -> float:
        """``[m, k] × [k, n]`` time: bilinear over profiled ``(n, k)``, linear over ``m``."""
        n0, n1, wn = bracket(self._ns, n)
        k0, k1, wk = bracket(self._ks, k)
        total = 0.0
        for nn, w_n in ((n0, 1 - wn), (n1, wn)):
            for kk, w_k in ((k0, 1 - wk), (k1, wk)):
                if w_n * w_k == 0:
                    continue
                series = self._gemm.get((nn, kk))
                if series is None:
                    raise InputError(
                        f"{self.folder}: GEMM profile has no rows for n={nn:g}, k={kk:g}"
                    )
                total += w_n * w_k * series.at(m, self.log)
        for size, top in ((n, self._ns[-1]), (k, self._ks[-1])):
            if size > top:  # wider than anything profiled: proportional
                self.log.count += 1
                total *= size / top
        return total

    def linear_ms(self, tokens: int) -> tuple[float, float]:
        s, hd = self.shape, self.shape.head_dim
        qkv = self.gemm_ms(tokens, (self.heads + 2 * self.kv_heads) * hd, s.hidden)
        out = self.gemm_ms(tokens, s.hidden, self.heads * hd)
        other = self.pointwise.layer_ms(tokens) if self.pointwise is not None else 0.0
        if self.moe is not None:
            router = self.gemm_ms(tokens, s.experts, s.hidden)
            return qkv + out + router + self.moe.experts_ms(tokens), other
        gate_up = self.gemm_ms(tokens, 2 * s.intermediate // self.tp, s.hidden)
        down = self.gemm_ms(tokens, s.hidden, s.intermediate // self.tp)
        return qkv + out + gate_up + down, other

    def all_to_all_ms(self, tokens: int, decode_only: bool) -> float:
        """A MoE layer's expert-parallel dispatch + combine (0 for a dense shape, EP 1)."""
        return 0.0 if self.moe is None else self.moe.all_to_all_ms(tokens, decode_only)

    def decode_attention_ms(self, n: int, ctx: int) -> float:
        step = max(ctx, 1)
        s0, s1, w = bracket(self._steps, step)
        t = (1 - w) * self._gen[s0].at(n, self.log)
        if w:
            t += w * self._gen[s1].at(n, self.log)
        if step > self._steps[-1]:
            self.log.count += 1
            t *= step / self._steps[-1]
        return t

    def prefill_attention_ms(self, chunk: int, prefix: int) -> float:
        equivalent = math.sqrt(chunk * chunk + 2 * chunk * prefix)
        top = self._prefill.xs[-1]
        if equivalent > top:  # longer than profiled: causal work grows as the length squared
            self.log.count += 1
            return self._prefill.ys[-1] * (equivalent / top) ** 2
        return self._prefill.at(equivalent, self.log)

    def attention_launch_ms(self) -> float:
        """Fixed cost of one attention kernel: prefill attention at its fastest profiled
        prompt (11 µs a layer on the H100 tables, at 1 token), what a step saves for each
        part a varlen kernel folds into one launch."""
        return min(self._prefill.ys)

    def allreduce_ms(self, tokens: int, decode_only: bool) -> float:
        if self.collective is None:
            return 0.0
        return self.collective.allreduce_ms(
            tokens * self.shape.hidden, decode_only, self.log, tokens
        )

    def embed_ms(self, tokens: int) -> float:
        return 0.0

    def head_ms(self, rows: int) -> float:
        return self.gemm_ms(rows, self.shape.vocab // self.tp, self.shape.hidden) if rows else 0.0

    def provenance(self) -> dict[str, Any]:
        comm = (
            self.collective.provenance()
            if self.collective is not None
            else collective.no_collective_provenance(self.tp)
        )
        return {
            "device_name": self.device,
            "profile": "aiconfigurator per-layer operator tables (ms per layer)",
            "profile_path": str(self.folder),
            "gemm_spikes_dropped": self.spikes,
            "dtype": self.weight_dtype,
            "kv_dtype": self.kv_dtype,
            "interpolation": "linear between profiled sizes (bilinear over GEMM n,k); "
            "proportional beyond the largest (prefill attention: as the length squared); "
            "clamped below the smallest",
            "approximations": [
                "prefill with prefix p read at length sqrt(c^2 + 2cp) (same causal work)",
                "embedding: not profiled (0)",
                "norms, rope, activation, residual adds, KV-cache write: "
                + (
                    "bytes / bandwidth + launch per kernel (pointwise_* keys)"
                    if self.pointwise is not None
                    else "not priced (0; --no-pointwise)"
                ),
                "decode attention step read at ctx",
                *self.head_notes,
            ]
            + (["tensor-parallel logits gather: not profiled (0)"] if self.tp > 1 else []),
            **(self.pointwise.provenance() if self.pointwise is not None else {}),
            **(self.moe.provenance() if self.moe is not None else {}),
            **comm,
        }
