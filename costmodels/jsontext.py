"""JSON a person wrote: a key given twice is a mistake, not "the last one wins"."""

from __future__ import annotations

import json
from typing import Any


class DuplicateKeyError(ValueError):
    """An object of the JSON text names one key twice."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(f"key {key!r} given twice (which one is meant?)")
        out[key] = value
    return out


def loads_unique(text: str | bytes) -> Any:
    """``json.loads`` that refuses a duplicate key (:class:`DuplicateKeyError`, a
    ``ValueError``); every other error as ``json.loads`` raises it."""
    return json.loads(text, object_pairs_hook=_unique)
