"""The tensor-parallel all-reduce: how many an iteration runs and what one costs.

What vLLM's Llama runs at TP ``N > 1`` (``vllm/model_executor/models/llama.py`` and
the layers it uses), on ``T = n + c`` tokens of an iteration:

* ``VocabParallelEmbedding``: each rank looks up its slice of the vocabulary and
  the ``[T, hidden]`` result is all-reduced (1 per iteration);
* per layer, ``o_proj`` and ``down_proj`` are ``RowParallelLinear`` (input split
  by rank, partial sums all-reduced): 2 all-reduces of ``[T, hidden]`` per layer
  (``qkv_proj`` / ``gate_up_proj`` are column-parallel and need none);
* the LM head is vocabulary-parallel and its logits are gathered (an all-gather
  of ``rows × vocab/N``): not in the collective tables below, left at 0.

So an iteration runs ``2·L + 1`` all-reduces of ``T × hidden`` bf16 elements.

Tables (one all-reduce's median time by message size, read linearly between
profiled sizes like the other operators, proportional beyond the largest):

* aiconfigurator ``*custom_allreduce*.csv``: ``num_gpus, message_size`` (bf16
  elements), ``latency`` (ms), ``backend`` ``vllm_graph`` (inside a CUDA graph) or
  ``vllm_eager``. vLLM runs decode-only iterations in a CUDA graph and prefills
  eagerly, so the default backend (``auto``) reads ``vllm_graph`` for iterations
  without a prefill chunk and ``vllm_eager`` for the others. vLLM V1 also captures
  mixed (prefill + decode) batches in piecewise CUDA graphs up to its largest capture
  size (512 tokens by default, ``max_cudagraph_capture_size``); ``vllm-v1`` reads
  ``vllm_graph`` for any iteration of at most that many tokens and ``vllm_eager``
  above it;
* Vidur ``network/*all_reduce*.csv``: ``num_workers, devices_per_node, size``
  (bytes), ``time_stats.all_reduce.median`` (ms): NCCL, one backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from servecal.profiler.importers.interp import ExtrapolationLog, Series
from servecal.util.errors import InputError

#: All-reduces of ``tokens × hidden`` per layer (attention output, MLP down projection).
ALLREDUCES_PER_LAYER = 2
#: All-reduces outside the layers (the vocabulary-parallel embedding's).
ALLREDUCES_OUTSIDE_LAYERS = 1
#: ``--comm-backend`` choices: auto = graph for decode-only iterations, eager otherwise;
#: vllm-v1 = graph for every iteration up to the largest captured size, eager above.
COMM_BACKENDS = ("auto", "graph", "eager", "vllm-v1")
#: vLLM V1's default largest CUDA-graph capture size (tokens per iteration).
V1_MAX_CAPTURE_TOKENS = 512
BF16_BYTES = 2


def allreduces_per_iteration(n_layers: int) -> int:
    """How many all-reduces one iteration of an ``n_layers`` model runs at TP > 1."""
    return ALLREDUCES_PER_LAYER * n_layers + ALLREDUCES_OUTSIDE_LAYERS


@dataclass(frozen=True)
class CommOptions:
    """How an importer prices the collective: ``backend`` (see :data:`COMM_BACKENDS`)
    and ``enabled`` (False: ``--no-comm``, all-reduces at 0 and no table needed)."""

    backend: str = "auto"
    enabled: bool = True
    graph_max_tokens: int = V1_MAX_CAPTURE_TOKENS  # vllm-v1 only

    def __post_init__(self) -> None:
        if self.backend not in COMM_BACKENDS:
            raise InputError(
                f"--comm-backend must be one of {', '.join(COMM_BACKENDS)}, got {self.backend!r}"
            )
        if self.graph_max_tokens < 1:
            raise InputError(f"--graph-max-tokens must be >= 1, got {self.graph_max_tokens}")


@dataclass(frozen=True)
class CollectiveTable:
    """One all-reduce's time by message size, per backend, at one TP degree."""

    path: Path
    series: dict[str, Series]  # backend label → times (ms) by message size
    unit: str  # what the size axis counts: "elements" or "bytes"
    rule: str  # which backend prices which iteration, in words
    decode_backend: str  # label read for decode-only iterations
    prefill_backend: str  # label read when the iteration has a prefill chunk
    graph_max_tokens: int | None = None  # vllm-v1: decode_backend up to this many tokens

    def allreduce_ms(
        self,
        elements: int,
        decode_only: bool,
        log: ExtrapolationLog | None = None,
        tokens: int | None = None,
    ) -> float:
        """One all-reduce of ``elements`` bf16 values (``tokens`` in the iteration)."""
        size = elements if self.unit == "elements" else elements * BF16_BYTES
        if self.graph_max_tokens is not None and tokens is not None:
            captured = tokens <= self.graph_max_tokens
        else:
            captured = decode_only
        backend = self.decode_backend if captured else self.prefill_backend
        return self.series[backend].at(size, log)

    def provenance(self) -> dict[str, Any]:
        return {
            "collective_table": self.path.name,
            "collective_path": str(self.path),
            "collective_backend": self.rule,
            "collective_count": (
                f"{ALLREDUCES_PER_LAYER} per layer + {ALLREDUCES_OUTSIDE_LAYERS} (embedding) "
                "all-reduces of (n + c) x hidden bf16 elements; logits gather not priced"
            ),
        }


def _read_csv(path: Path, needed: tuple[str, ...]) -> pd.DataFrame:
    from servecal.profiler.importers.csvfile import read_profile_csv

    return read_profile_csv(path, needed)


def _one_table(folder: Path, pattern: str, tp: int) -> Path:
    matches = sorted(folder.glob(pattern))
    if not matches:
        raise InputError(
            f"{folder}: no {pattern} collective table for --tp {tp} "
            "(pass --no-comm to price the all-reduces at 0)"
        )
    if len(matches) > 1:
        names = ", ".join(m.name for m in matches)
        raise InputError(f"{folder}: expected one {pattern} collective table, found {names}")
    return matches[0]


def read_aiconfigurator(
    folder: Path, tp: int, backend: str, graph_max_tokens: int = V1_MAX_CAPTURE_TOKENS
) -> CollectiveTable:
    """vLLM's all-reduce at ``num_gpus = tp`` from aiconfigurator's custom_allreduce table."""
    path = _one_table(folder, "*custom_allreduce*.csv", tp)
    frame = _read_csv(path, ("num_gpus", "message_size", "latency", "backend"))
    rows = frame[frame["num_gpus"] == tp]
    if rows.empty:
        have = sorted(int(x) for x in frame["num_gpus"].unique())
        raise InputError(f"{path}: no all-reduce rows for num_gpus={tp} (profiled: {have})")
    series = {
        str(b): Series.from_pairs(g["message_size"], g["latency"])
        for b, g in rows.groupby("backend")
    }
    decode = prefill = f"vllm_{backend}"
    if backend in ("auto", "vllm-v1"):
        decode, prefill = "vllm_graph", "vllm_eager"
    for label in {decode, prefill}:
        if label not in series:
            raise InputError(
                f"{path}: no backend '{label}' rows for num_gpus={tp} (have: {', '.join(series)})"
            )
    if backend == "auto":
        rule = (
            "auto: vllm_graph for decode-only iterations (vLLM runs them in a CUDA graph), "
            "vllm_eager when the iteration prefills"
        )
    elif backend == "vllm-v1":
        rule = (
            f"vllm-v1: vllm_graph for every iteration of <= {graph_max_tokens} tokens "
            "(piecewise CUDA graphs capture mixed batches too), vllm_eager above"
        )
    else:
        rule = f"{decode} for every iteration (--comm-backend {backend})"
    limit = graph_max_tokens if backend == "vllm-v1" else None
    return CollectiveTable(path, series, "elements", rule, decode, prefill, limit)


def read_vidur(
    folder: Path, tp: int, backend: str, graph_max_tokens: int = V1_MAX_CAPTURE_TOKENS
) -> CollectiveTable:
    """NCCL all-reduce over ``tp`` GPUs of one node from Vidur's network profile."""
    if backend != "auto":
        raise InputError(
            f"--comm-backend {backend}: Vidur's network profile has one backend (NCCL); "
            "graph/eager is an aiconfigurator choice"
        )
    path = _one_table(folder / "network", "*all_reduce*.csv", tp)
    needed = ("num_workers", "devices_per_node", "size", "time_stats.all_reduce.median")
    frame = _read_csv(path, needed)
    rows = frame[(frame["num_workers"] == tp) & (frame["devices_per_node"] == tp)]
    if "collective" in rows.columns:
        rows = rows[rows["collective"] == "all_reduce"]
    if rows.empty:
        raise InputError(f"{path}: no single-node all_reduce rows for {tp} workers")
    series = {"nccl": Series.from_pairs(rows["size"], rows["time_stats.all_reduce.median"])}
    rule = "nccl (Vidur network profile, one backend for every iteration)"
    return CollectiveTable(path, series, "bytes", rule, "nccl", "nccl")


def open_collective(
    reader: Any, folder: Path, tp: int, options: CommOptions
) -> CollectiveTable | None:
    """``reader(folder, tp, backend)``'s table, or None at TP 1 or with ``--no-comm``."""
    if tp == 1 or not options.enabled:
        return None
    return reader(folder, tp, options.backend, options.graph_max_tokens)


def no_collective_provenance(tp: int) -> dict[str, Any]:
    """Provenance keys when no table priced the collective (TP 1, or ``--no-comm``)."""
    why = None if tp == 1 else "none: --no-comm (all-reduces priced at 0)"
    return {"collective_table": None, "collective_backend": why}
