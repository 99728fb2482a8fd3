"""Composed steps against published per-step timings, graded per step kind, held out.

Three sources, each graded on decode steps and mixed steps separately (and prefills where
the source has them), median ``|predicted/measured - 1|`` and median ``predicted/measured``:

* ``qwen3``: vLLM 0.12 (V1: CUDA graphs, chunked prefill) serving Qwen3-32B on H100 SXM at
  TP 2/4/8 (aiconfigurator's silicon runs, ``tests/data/modern/``): decode steps are the
  decode-dominated osl-1,024 rows (``silicon_decode_steps``), mixed steps are read from
  the osl-128 and osl-1,024 runs of one configuration (``silicon_mixed_steps``). Composed
  from aiconfigurator's H100 vLLM 0.14 tables, nothing fitted: as a graph engine
  (``--engine graph``: one varlen attention kernel, vLLM V1's all-reduce; with and
  without ``--qk-norm``) and, for comparison, as an eager one (``--engine eager``).
* ``sglang``: SGLang 0.5.1 serving Qwen3-32B on H100 SXM at TP 2/4/8 (the same
  aiconfigurator file's SGLang rows): decode steps as for ``qwen3`` (osl 512 against 256),
  composed the same way. Its mixed steps are not graded: the prompt cost its runs imply
  falls below what the prompt's GEMMs take at the GPU's peak (printed), and SGLang does
  not put prompts into decode steps unless run with ``--enable-mixed-chunk``.
* ``sarathi`` and ``splitwise``: eager engines on A100 (``tests/data/eager/``), composed
  as an eager engine runs a step plus the host-overhead model, fitted on half the
  configurations; every step here is predicted by the model fitted on the other half.

    python benchmarks/step_kinds.py [qwen3|sglang|sarathi|splitwise ...]     # all: ~20 s
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from servecal.profiler.importers import step_rules
from servecal.profiler.importers.aiconfigurator import AiConfiguratorSource
from servecal.profiler.importers.collective import CommOptions
from servecal.profiler.importers.compose import StepComposition
from servecal.profiler.importers.holdout import gpu_ms, holdout
from servecal.profiler.importers.interp import ExtrapolationLog
from servecal.profiler.importers.overhead import requests_in_batch
from servecal.profiler.importers.published import halves, sarathi_steps, splitwise_steps
from servecal.profiler.importers.silicon import (
    H100_SXM_BF16_TFLOPS,
    prompt_compute_floor_ms,
    silicon_decode_steps,
    silicon_mixed_steps,
)
from servecal.profiler.importers.stepcheck import by_kind, composed_steps
from servecal.profiler.shapes import ModelShape

TESTS = Path(__file__).resolve().parents[1] / "tests" / "data"
MODERN, EAGER = TESTS / "modern", TESTS / "eager"
SILICON = MODERN / "aiconfigurator_silicon_qwen3-32b_h100_vllm0.12.csv"


def qwen3_steps() -> pd.DataFrame:
    decode = silicon_decode_steps(SILICON)
    decode = decode[decode["decode_dominated"]]
    return pd.concat([decode, silicon_mixed_steps(SILICON)], ignore_index=True)


def qwen3_sources(comm: str, qk_norm: bool) -> tuple[ModelShape, dict]:
    """Qwen3-32B's shape and its H100 aiconfigurator sources at TP 2, 4 and 8."""
    shape = ModelShape.resolve(str(MODERN / "qwen3-32b.json"))
    sources = {
        tp: AiConfiguratorSource(
            MODERN / "aiconfigurator_h100_qwen3_32b", shape, tp, ExtrapolationLog(),
            CommOptions(comm), True, None, qk_norm,
        )
        for tp in (2, 4, 8)
    }  # fmt: skip
    return shape, sources


def qwen3(engine: str = "graph", qk_norm: bool = True) -> pd.DataFrame:
    """Every qwen3 step with its composed ``predicted`` ms (nothing fitted)."""
    shape, sources = qwen3_sources("vllm-v1" if engine == "graph" else "auto", qk_norm)
    # graph: varlen attention and capture-size padding (--engine graph --graph-padding)
    composition = step_rules(engine, None, graph_padding=engine == "graph")[1]
    return composed_steps(sources, shape, qwen3_steps(), composition)


SGLANG = MODERN / "aiconfigurator_silicon_qwen3-32b_h100_sglang0.5.1.csv"


def sglang() -> tuple[pd.DataFrame, pd.DataFrame]:
    """SGLang 0.5.1's decode steps composed as a graph engine runs them (nothing fitted),
    and the prompt costs its runs imply against the compute floor (why no mixed step is
    graded on it)."""
    decode = silicon_decode_steps(SGLANG, osl=512)
    decode = decode[decode["decode_dominated"]]
    shape, sources = qwen3_sources("vllm-v1", qk_norm=True)
    graph = step_rules("graph", None, graph_padding=True)[1]
    mixed = silicon_mixed_steps(SGLANG, short=128, long=512)
    floor = prompt_compute_floor_ms(shape, mixed["chunk"], mixed["tp"], H100_SXM_BF16_TFLOPS)
    return composed_steps(sources, shape, decode, graph), mixed.assign(floor_ms=floor)


def held_out(steps: pd.DataFrame, composed: np.ndarray, fit_scale: bool) -> pd.DataFrame:
    """Each step predicted by the host-overhead model fitted on the other half."""
    half = halves(steps).to_numpy()
    n = requests_in_batch(steps["n_decode"], steps["chunk"])
    predicted = np.zeros(len(steps))
    for result in holdout(steps, composed, fit_scale):
        rows = half != result.fit_half
        predicted[rows] = result.model.step_ms(composed[rows, 0], n[rows], composed[rows, 1])
    return steps.assign(predicted=predicted)


def a100_source(shape: ModelShape, tp: int, device: str | None = None) -> AiConfiguratorSource:
    return AiConfiguratorSource(
        EAGER / "aiconfigurator_a100", shape, tp, ExtrapolationLog(), CommOptions(), True, device
    )


def sarathi() -> pd.DataFrame:
    shape = ModelShape.resolve(str(EAGER / "yi-34b.json"))
    steps = sarathi_steps(EAGER)
    # Sarathi-Serve pads a step's tokens to a multiple of 8 (its model runner, for tensor cores)
    align8 = StepComposition("separate", "align8")
    composed = gpu_ms(a100_source(shape, 2, "a100-pcie-80gb"), shape, steps, align8)
    return held_out(steps, composed, fit_scale=True)


def splitwise() -> pd.DataFrame:
    shape = ModelShape.resolve(str(EAGER / "llama-2-70b.json"))
    steps = splitwise_steps(EAGER / "splitwise_llama2-70b_a100.csv", "llama2-70b", "a100-80gb")
    composed = np.zeros((len(steps), 2))
    for tp in sorted(steps["tp"].unique()):
        rows = (steps["tp"] == tp).to_numpy()
        composed[rows] = gpu_ms(a100_source(shape, int(tp)), shape, steps[rows])
    return held_out(steps, composed, fit_scale=False)


def show(title: str, steps: pd.DataFrame) -> None:
    print(f"\n{title}")
    print(
        f"  {'kind':<8} {'steps':>5} {'median error':>13} {'median pred/actual':>19} {'beyond':>7}"
    )
    for r in by_kind(steps).itertuples():
        print(
            f"  {r.kind:<8} {r.steps:>5} {100 * r.median_error:12.1f}% {r.median_ratio:19.3f}"
            f" {r.beyond_profile:>7}"
        )


def main(argv: list[str]) -> int:
    which = argv or ["qwen3", "sglang", "sarathi", "splitwise"]
    if "qwen3" in which:
        show("qwen3 (vLLM 0.12 V1, H100, TP 2/4/8): --engine graph --qk-norm", qwen3())
        show("  the same without --qk-norm", qwen3(qk_norm=False))
        show("  composed as an eager engine (--engine eager --qk-norm)", qwen3("eager"))
        steps = qwen3()
        print("\n  per step (graph, --qk-norm):")
        for r in steps.itertuples():
            print(
                f"  tp {r.tp} n {r.n_decode:>3} c {r.chunk:>4} ctx {r.ctx:>4}: measured "
                f"{r.ms:7.2f} ms  composed {r.predicted:7.2f}  ratio {r.predicted / r.ms:.3f}"
            )
    if "sglang" in which:
        decode, mixed = sglang()
        show("sglang (0.5.1, H100, TP 2/4/8): --engine graph --graph-padding --qk-norm", decode)
        for r in decode.itertuples():
            print(
                f"  tp {r.tp} n {r.n_decode:>3} ctx {r.ctx:>4}: measured {r.ms:6.2f} ms  "
                f"composed {r.predicted:6.2f}  ratio {r.predicted / r.ms:.3f}"
            )
        ratio = mixed["prompt_ms"] / mixed["floor_ms"]
        print(
            f"  mixed: not graded. The prompt cost X its runs imply is {ratio.min():.2f}-"
            f"{ratio.max():.2f}x (median {ratio.median():.2f}x) the prompt's compute floor "
            f"({(ratio < 1).sum()} of {len(mixed)} configurations below it)"
        )
        for r in mixed.itertuples():
            print(
                f"  tp {r.tp} B {r.n_decode + 1:>3} isl {r.chunk:>4}: X {r.prompt_ms:6.2f} ms, "
                f"floor {r.floor_ms:6.2f} ms ({r.prompt_ms / r.floor_ms:.2f}x)"
            )
    if "sarathi" in which:
        show("sarathi (Yi-34B TP 2, A100 PCIe, eager; held out)", sarathi())
    if "splitwise" in which:
        show("splitwise (Llama-2-70B TP 2/4/8, A100, eager; held out)", splitwise())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
