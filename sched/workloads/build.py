"""Turn drawn arrays into :class:`Request` objects, clipping to the context limit."""

from __future__ import annotations

import numpy as np

from servecal.sched.request import Request


def clip_to_context(
    prompt: np.ndarray, output: np.ndarray, context_limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """Clip so that ``prompt + output <= context_limit``, each at least one token.

    The prompt keeps priority (it is what the user sent); the output is cut to the
    room left, as an engine's ``max_tokens = context − prompt`` would.
    """
    prompt = np.clip(np.asarray(prompt, dtype=np.int64), 1, context_limit - 1)
    output = np.clip(np.asarray(output, dtype=np.int64), 1, context_limit - prompt)
    return prompt, output


def build_requests(
    arrival_ms: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    ttft_slo_ms: np.ndarray,
    tpot_slo_ms: np.ndarray,
    slo_class: np.ndarray,
) -> list[Request]:
    """One :class:`Request` per row, ``rid`` in arrival order (inputs must be sorted)."""
    return [
        Request(
            rid=i,
            arrival_ms=float(a),
            prompt_tokens=int(p),
            output_tokens=int(o),
            ttft_slo_ms=float(ttft),
            tpot_slo_ms=float(tpot),
            slo_class=str(c),
        )
        for i, (a, p, o, ttft, tpot, c) in enumerate(
            zip(arrival_ms, prompt, output, ttft_slo_ms, tpot_slo_ms, slo_class, strict=True)
        )
    ]
