"""Workloads for the offline model: trace files and the short/long generator.

``short-long:F`` draws a fraction ``F`` of *short* requests (prompt and output
lengths of one row of the Azure conversation trace: chat turns, prompt median
~1,000 tokens, output median ~130) and ``1 - F`` *long* ones (one row of the arXiv
summarisation set: prompts of 2-4k tokens, short outputs), interleaved in a random
arrival order. Rows with ``s + o > M`` can never run and are redrawn, so at small
``M`` the long class loses its longest rows (reported by :func:`generate`'s caller
through the instance it returns).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from servecal.sched.sortedf.model import Instance
from servecal.util.errors import InputError

# Column pairs (prompt, output) accepted in request files, first match wins.
_COLUMNS = (
    ("prompt_tokens", "output_tokens"),
    ("ContextTokens", "GeneratedTokens"),
    ("num_prefill_tokens", "num_decode_tokens"),
)


def _lengths(df: pd.DataFrame, where: str) -> tuple[np.ndarray, np.ndarray]:
    for p_col, o_col in _COLUMNS:
        if p_col in df.columns and o_col in df.columns:
            break
    else:
        wanted = " or ".join(f"{p},{o}" for p, o in _COLUMNS)
        raise InputError(f"{where}: needs columns {wanted}; found {','.join(map(str, df.columns))}")
    out = []
    for col, least in ((p_col, 1), (o_col, 1)):
        vals = pd.to_numeric(df[col], errors="coerce")
        bad = vals.isna() | (vals < least) | (vals != vals.round())
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(
                f"{where}: column {col}, row {row + 2}: {df[col].iloc[row]!r} is not an "
                f"integer >= {least}"
            )
        out.append(vals.to_numpy(dtype=np.int64))
    return out[0], out[1]


def read_requests(path: str | Path, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths from a CSV (``prompt_tokens,output_tokens``, the Azure
    trace's ``ContextTokens,GeneratedTokens`` or Vidur's ``num_prefill_tokens,
    num_decode_tokens``), the first ``n`` rows in file (arrival) order."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        df = pd.read_csv(path, nrows=n)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: not a readable CSV ({first})") from None
    if df.empty:
        raise InputError(f"{path}: no requests in the file")
    return _lengths(df, str(path))


def _bundled(name: str) -> tuple[np.ndarray, np.ndarray]:
    with resources.files("servecal.sched.sortedf.data").joinpath(name).open("r") as fh:
        return _lengths(pd.read_csv(fh), name)


def short_pool() -> tuple[np.ndarray, np.ndarray]:
    """Conversation-shaped lengths (Azure conv trace sample)."""
    return _bundled("azure_conv_lengths.csv")


def long_pool() -> tuple[np.ndarray, np.ndarray]:
    """Summarisation-shaped lengths (arXiv sample)."""
    return _bundled("arxiv_summarization_lengths.csv")


def parse_spec(spec: str) -> float:
    """``short-long:F`` → the short fraction ``F`` in [0, 1]."""
    name, _, frac = spec.partition(":")
    if name != "short-long":
        raise InputError(f"--generate {spec!r}: only 'short-long:F' is known (e.g. short-long:0.8)")
    if not frac.strip():  # 'short-long:' (an unset shell variable): never the default
        raise InputError(f"--generate {spec!r}: give the short fraction F (e.g. short-long:0.8)")
    try:
        f = float(frac)
    except ValueError:
        raise InputError(f"--generate {spec!r}: F must be a number in [0, 1]") from None
    if not 0.0 <= f <= 1.0:
        raise InputError(f"--generate {spec!r}: F must be in [0, 1]")
    return f


def _draw(pool: tuple[np.ndarray, np.ndarray], k: int, memory: int, rng: np.random.Generator):
    s, o = pool
    fits = np.flatnonzero(s + o <= memory)
    if k and fits.size == 0:
        raise InputError(f"--memory {memory}: no request of the pool fits (s + o > M for all)")
    pick = rng.choice(fits, size=k, replace=True)
    return s[pick], o[pick]


def short_long(n: int, short_fraction: float, memory: int, rng: np.random.Generator) -> Instance:
    """``n`` requests, ``round(F·n)`` short and the rest long, in a random arrival order."""
    if n < 1:
        raise InputError("--n must be >= 1")
    n_short = int(round(short_fraction * n))
    s1, o1 = _draw(short_pool(), n_short, memory, rng)
    s2, o2 = _draw(long_pool(), n - n_short, memory, rng)
    s = np.concatenate([s1, s2])
    o = np.concatenate([o1, o2])
    perm = rng.permutation(n)
    return Instance(s[perm], o[perm], memory)


def random_tiny(
    rng: np.random.Generator, n_max: int = 6, o_max: int = 6, s_max: int = 8
) -> Instance:
    """A small random instance for checks against the exact optimum."""
    n = int(rng.integers(1, n_max + 1))
    o = rng.integers(1, o_max + 1, size=n)
    s = rng.integers(0, s_max + 1, size=n)
    memory = int(rng.integers(int((s + o).max()), int((s + o).sum()) + 2))
    return Instance(s, o, memory)
