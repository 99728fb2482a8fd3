"""TPOT targets and arrival rates for a calibrated device, scaled from the paper's setting.

docs/spec.md §1's numbers (a 25 ms TPOT target, chat at 60 req/s) are for Llama-3-8B on an
A100, whose costs the analytic model gives. On another device/model they mean
nothing as such — a 25 ms target on a CPU ``tiny`` model whose decode iteration
takes 5 ms is loose, on one where it takes 40 ms impossible — so both are carried
over as *ratios* to the device's own costs, read from its calibrated table:

* ``D = 25 ms × T̂(n_ref, 0, ctx_ref) / T_A100(n_ref, 0)``: the target is the same
  multiple of a decode iteration at the reference batch (``n_ref`` decodes of
  ``ctx_ref`` tokens) as on the A100;
* ``rate = 60 req/s × W_A100 / Ŵ``, with ``W`` the device time one mean chat request
  costs (its prompt as one chunk, plus its share of ``mean output`` decode iterations
  at the reference batch): the same offered load, as a fraction of the device.

``python -m servecal.sched.torch_executor.targets TABLE.json`` prints both.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass
from typing import Any

from servecal.costmodels import AnalyticPredictor
from servecal.costmodels.predictor import Predictor

#: The paper's setting (docs/spec.md §1): TPOT target and chat's default rate on the A100 model.
PAPER_TPOT_MS = 25.0
PAPER_CHAT_RATE = 60.0
#: Chat's mean prompt and output (log-normal medians 256/129, log-sd 0.8/0.86).
CHAT_MEAN_PROMPT = 256.0 * math.exp(0.8**2 / 2)
CHAT_MEAN_OUTPUT = 129.0 * math.exp(0.86**2 / 2)


@dataclass(frozen=True)
class Targets:
    """Scaled TPOT target (ms) and chat rate (req/s), with the costs they come from."""

    tpot_slo_ms: float
    rate: float
    n_ref: int
    ctx_ref: int
    decode_ms: float
    decode_ms_paper: float
    request_ms: float
    request_ms_paper: float


def _request_ms(p: Predictor, n_ref: int, ctx_ref: int) -> float:
    decode = float(p.predict(n_ref, 0, ctx_ref, 0, q=0.5))
    prefill = float(p.predict(0, round(CHAT_MEAN_PROMPT), 0, 0, q=0.5))
    return prefill + CHAT_MEAN_OUTPUT * decode / n_ref


def derive_targets(table: Predictor, n_ref: int = 16, ctx_ref: int = 512) -> Targets:
    """``Targets`` for the device ``table`` was calibrated on (see module doc)."""
    if n_ref < 1 or ctx_ref < 1:
        raise ValueError("n_ref and ctx_ref must be >= 1")
    paper = AnalyticPredictor()
    decode = float(table.predict(n_ref, 0, ctx_ref, 0, q=0.5))
    decode_paper = float(paper.predict(n_ref, 0, ctx_ref, 0, q=0.5))
    request = _request_ms(table, n_ref, ctx_ref)
    request_paper = _request_ms(paper, n_ref, ctx_ref)
    return Targets(
        tpot_slo_ms=PAPER_TPOT_MS * decode / decode_paper,
        rate=PAPER_CHAT_RATE * request_paper / request,
        n_ref=n_ref,
        ctx_ref=ctx_ref,
        decode_ms=decode,
        decode_ms_paper=decode_paper,
        request_ms=request,
        request_ms_paper=request_paper,
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m servecal.sched.torch_executor.targets TABLE.json", file=sys.stderr)
        return 2
    from servecal.costmodels import CostTable
    from servecal.util.errors import InputError

    try:
        targets = derive_targets(CostTable.load(argv[0]))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    doc: dict[str, Any] = asdict(targets)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in doc.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
