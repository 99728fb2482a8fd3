"""Reading the report's energy table back (shared by the plug-in's end-to-end tests)."""

from __future__ import annotations

import math
import re

#: a number as the report prints it: thousands separated by commas, maybe an exponent
#: (J per good request passes 1,000 when goodput collapses on a loaded host)
NUMBER = r"[0-9][0-9.,]*(?:e-?[0-9]+)?"


def priced_per_token(html: str) -> float:
    """The J per output token the report's energy table gives the plug-in's run priced
    by the fake meter (NaN when there is no such row)."""
    text = re.sub(r"<[^>]+>", " ", html)
    row = re.search(rf"sloweave-vllm\s+{NUMBER}\s+(?:—|{NUMBER})\s+({NUMBER})\s+fake meter", text)
    return float(row.group(1).replace(",", "")) if row else math.nan
