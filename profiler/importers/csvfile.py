"""Reading a public profile's CSV: a damaged or truncated file is one line, not numbers.

A profile cut short (a download or copy that stopped) reads as a valid CSV with a
last row of missing or shortened values, and then composes iteration times off by
up to 2x from what the profile measured. Every CSV writer ends its last line with a
newline; a file that does not, or a needed column with a missing value, is refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from servecal.util.errors import InputError


def read_profile_csv(path: Path, needed: tuple[str, ...]) -> pd.DataFrame:
    """``path`` as a frame with every ``needed`` column present and filled."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 1))
            last = fh.read(1)
        frame = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: unreadable CSV ({type(exc).__name__})") from None
    if size and last not in (b"\n", b"\r"):
        raise InputError(f"{path}: its last line is cut off (no newline at the end): truncated?")
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise InputError(f"{path}: column '{missing[0]}': missing")
    for col in needed:
        gaps = np.flatnonzero(frame[col].isna().to_numpy())
        if gaps.size:
            raise InputError(
                f"{path}: row {int(gaps[0]) + 2}: column '{col}': missing value "
                f"({gaps.size} rows; a truncated or damaged file?)"
            )
    return frame
