"""Operator times from Vidur's profiles (``time_stats.<op>.median``, ms; docs/profiler.md).

A folder (or its ``*_mlp.csv``) holding:

* ``*_mlp.csv``: per-layer linear and pointwise ops over ``num_tokens`` and TP
  degree; the file whose ``n_head, n_kv_head, n_embd, n_expanded_embd,
  vocab_size`` match the model is used (read linearly between token counts);
* ``*attention_samples.txt`` (Vidur's A100 attention profile, transcribed): decode
  (batch × KV length) and prefill (chunk × KV length) medians. It was measured on
  Llama-2-7B (32 query and 32 KV heads of 128, TP 1); attention is *fitted* to it
  as ``a + b·work + d·size`` (decode work = batch·KV, prefill work = chunk·(KV +
  chunk/2)) and the per-work terms are scaled by the target's KV width (decode,
  bandwidth) or query width (prefill, compute) per GPU;
* ``network/*all_reduce*.csv``: NCCL all-reduce medians by message size (bytes),
  needed for TP > 1 unless ``--no-comm`` (see
  :mod:`~servecal.profiler.importers.collective`).

The LM head is not in Vidur's MLP table: it is read as the gate/up projection at
the same row count scaled by ``vocab / (2 · intermediate)`` (weight-bound at the
small row counts a head sees).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servecal.profiler.importers import collective
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.interp import ExtrapolationLog, Series
from servecal.profiler.shapes import ModelShape
from servecal.util.errors import InputError

GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
OTHER_OPS = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
SHAPE_COLUMNS = {
    "n_head": "n_heads",
    "n_kv_head": "n_kv_heads",
    "n_embd": "hidden",
    "n_expanded_embd": "intermediate",
    "vocab_size": "vocab",
}
#: Dimensions of the model the attention samples were measured on (Llama-2-7B, TP 1).
ATTENTION_REFERENCE = {"n_heads": 32, "n_kv_heads": 32, "head_dim": 128}


@dataclass(frozen=True)
class AttentionSamples:
    """Rows of the transcribed attention profile: (batch or chunk, KV length, median ms)."""

    decode: np.ndarray  # [rows, 3]: batch, kv, ms
    prefill: np.ndarray  # [rows, 3]: chunk, kv, ms


def parse_attention_samples(path: Path) -> AttentionSamples:
    """``D kv first_batch : t t ...`` and ``P chunk : kv:t kv:t ...`` lines; ``#`` comments."""
    decode, prefill = [], []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read attention samples ({exc.strerror})") from None
    for number, raw in enumerate(lines, 1):
        line = re.sub(r"\[.*?\]", "", raw.split("#", 1)[0]).strip()
        if not line:
            continue
        try:
            head, body = line.split(":", 1)
            tag, *nums = head.split()
            if tag == "D":
                kv, first = int(nums[0]), int(nums[1])
                for i, t in enumerate(body.split()):
                    decode.append((first + i, kv, float(t)))
            elif tag == "P":
                chunk = int(nums[0])
                for pair in body.split():
                    kv, t = pair.split(":")
                    prefill.append((chunk, int(kv), float(t)))
            else:
                raise ValueError(tag)
        except (ValueError, IndexError):
            raise InputError(f"{path}: line {number}: not a D/P attention sample line") from None
    if not decode or not prefill:
        raise InputError(f"{path}: needs both decode (D) and prefill (P) lines")
    return AttentionSamples(np.array(decode, dtype=float), np.array(prefill, dtype=float))


def fit_linear(features: np.ndarray, ms: np.ndarray) -> np.ndarray:
    """Least-squares coefficients of ``ms ≈ [1, features...] @ coef``."""
    design = np.column_stack([np.ones(len(ms)), features])
    coef, *_ = np.linalg.lstsq(design, ms, rcond=None)
    return coef


def decode_features(batch: np.ndarray, kv: np.ndarray) -> np.ndarray:
    return np.column_stack([batch * kv, batch])


def prefill_features(chunk: np.ndarray, kv: np.ndarray) -> np.ndarray:
    return np.column_stack([chunk * (kv + chunk / 2), chunk])


def _one(folder: Path, pattern: str, what: str) -> Path:
    matches = sorted(folder.glob(pattern))
    if not matches:
        raise InputError(f"{folder}: no {pattern} file ({what})")
    return matches[0]


class VidurSource:
    """Per-layer operator times of ``shape`` at tensor-parallel degree ``tp``."""

    name = "vidur"

    def __init__(
        self,
        path: str | Path,
        shape: ModelShape,
        tp: int,
        log: ExtrapolationLog,
        comm: CommOptions | None = None,
    ) -> None:
        path = Path(path)
        folder = path if path.is_dir() else path.parent
        self.shape, self.tp, self.log, self.folder = shape, tp, log, folder
        self.mlp_path = path if path.is_file() else self._matching_mlp(folder)
        self._ops = self._read_mlp(self.mlp_path)
        self.attention_path = _one(folder, "*attention_samples*.txt", "attention profile")
        samples = parse_attention_samples(self.attention_path)
        ref = ATTENTION_REFERENCE
        kv_ratio = (max(1, shape.n_kv_heads // tp) * shape.head_dim) / (
            ref["n_kv_heads"] * ref["head_dim"]
        )
        q_ratio = (shape.n_heads // tp * shape.head_dim) / (ref["n_heads"] * ref["head_dim"])
        d, p = samples.decode, samples.prefill
        self.decode_coef = fit_linear(decode_features(d[:, 0], d[:, 1]), d[:, 2])
        self.prefill_coef = fit_linear(prefill_features(p[:, 0], p[:, 1]), p[:, 2])
        self.decode_scale = np.array([1.0, kv_ratio, kv_ratio])
        self.prefill_scale = np.array([1.0, q_ratio, q_ratio])
        self.collective = collective.open_collective(
            collective.read_vidur, folder, tp, comm or CommOptions()
        )

    def _matching_mlp(self, folder: Path) -> Path:
        candidates = sorted(folder.glob("*mlp*.csv"))
        want = {col: getattr(self.shape, attr) for col, attr in SHAPE_COLUMNS.items()}
        for candidate in candidates:
            head = pd.read_csv(candidate, nrows=1)
            if all(col in head and int(head[col].iloc[0]) == v for col, v in want.items()):
                return candidate
        names = ", ".join(c.name for c in candidates) or "none"
        raise InputError(
            f"{folder}: no *mlp*.csv profiles {self.shape.name} "
            f"(heads {self.shape.n_heads}/{self.shape.n_kv_heads}, hidden {self.shape.hidden}, "
            f"MLP {self.shape.intermediate}, vocab {self.shape.vocab}); found {names}"
        )

    def _read_mlp(self, path: Path) -> dict[str, Series]:
        try:
            frame = pd.read_csv(path)
        except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: unreadable CSV ({type(exc).__name__})") from None
        for col in ("num_tokens", "num_tensor_parallel_workers", "time_stats.emb.median"):
            if col not in frame.columns:
                raise InputError(f"{path}: column '{col}': missing")
        for col, attr in SHAPE_COLUMNS.items():
            if col in frame.columns and (frame[col] != getattr(self.shape, attr)).any():
                raise InputError(
                    f"{path}: column '{col}': profiles {int(frame[col].iloc[0])}, "
                    f"but {self.shape.name} has {attr}={getattr(self.shape, attr)}"
                )
        rows = frame[frame["num_tensor_parallel_workers"] == self.tp]
        if rows.empty:
            have = sorted(frame["num_tensor_parallel_workers"].unique())
            raise InputError(f"{path}: no rows for TP {self.tp} (profiled: {have})")
        ops = {}
        for op in ("emb", *GEMM_OPS, *OTHER_OPS):
            col = f"time_stats.{op}.median"
            if col not in rows.columns:
                raise InputError(f"{path}: column '{col}': missing")
            ops[op] = Series.from_pairs(rows["num_tokens"], rows[col])
        return ops

    def linear_ms(self, tokens: int) -> tuple[float, float]:
        gemm = sum(self._ops[op].at(tokens, self.log) for op in GEMM_OPS)
        other = sum(self._ops[op].at(tokens, self.log) for op in OTHER_OPS)
        return gemm, other

    def decode_attention_ms(self, n: int, ctx: int) -> float:
        x = np.array([1.0, n * ctx, n])
        return max(0.0, float(x @ (self.decode_coef * self.decode_scale)))

    def prefill_attention_ms(self, chunk: int, prefix: int) -> float:
        x = np.array([1.0, chunk * (prefix + chunk / 2), chunk])
        return max(0.0, float(x @ (self.prefill_coef * self.prefill_scale)))

    def attention_launch_ms(self) -> float:
        """Fixed cost of one attention kernel: the prefill fit's intercept (>= 0)."""
        return max(0.0, float(self.prefill_coef[0] * self.prefill_scale[0]))

    def allreduce_ms(self, tokens: int, decode_only: bool) -> float:
        if self.collective is None:
            return 0.0
        return self.collective.allreduce_ms(
            tokens * self.shape.hidden, decode_only, self.log, tokens
        )

    def embed_ms(self, tokens: int) -> float:
        return self._ops["emb"].at(tokens, self.log)

    def head_ms(self, rows: int) -> float:
        if not rows:
            return 0.0
        ratio = self.shape.vocab / (2 * self.shape.intermediate)
        return self._ops["mlp_up_proj"].at(rows, self.log) * ratio

    def provenance(self) -> dict[str, Any]:
        notes = [
            "attention fitted to Llama-2-7B TP1 samples as a + b*work + d*size, per-work "
            f"terms scaled by KV width x{self.decode_scale[1]:.3f} (decode) and query width "
            f"x{self.prefill_scale[1]:.3f} (prefill)",
            "LM head = mlp_up_proj at the same rows x vocab/(2*intermediate)",
            "ops counted once per layer as in Vidur (add: once)",
        ]
        if self.tp > 1:
            notes.append("tensor-parallel logits gather: not profiled (0)")
        comm = (
            self.collective.provenance()
            if self.collective is not None
            else collective.no_collective_provenance(self.tp)
        )
        return {
            "device_name": "NVIDIA A100 (Vidur profile)",
            "profile": "Vidur per-layer operator profile (time_stats.<op>.median, ms)",
            "profile_path": str(self.mlp_path),
            "attention_profile": str(self.attention_path),
            "interpolation": "linear between profiled token counts; proportional beyond the "
            "largest; clamped below the smallest",
            "decode_attention_coef": [float(c) for c in self.decode_coef * self.decode_scale],
            "prefill_attention_coef": [float(c) for c in self.prefill_coef * self.prefill_scale],
            "approximations": notes,
            **comm,
        }
