"""Is this the table that was fitted, and for this device and model? (standard library only)

* **Content hash.** Every cost table carries ``content_hash``: SHA-256 of the
  canonical JSON of what it answers with (:data:`HASHED_FIELDS`: grid, rule,
  quantiles, margin, energy, fingerprint). A loader recomputes it; a mismatch
  means the numbers were edited after they were written, and loading refuses
  unless told to allow it (``--allow-edited``: :attr:`TableTrust.allow_edited`).
  A table *file* without a ``content_hash``
  (deleted, or written by hand) is refused the same way: its numbers cannot be
  checked (:func:`check_hash_present`).
* **Fingerprint.** A table's fingerprint names the device and model it was
  measured on. :func:`compare_fingerprints` compares the keys of
  :data:`FINGERPRINT_KEYS` that *both* sides have (a file may lack some) and
  refuses a mismatch, or with ``--allow-mismatch`` (:attr:`TableTrust.allow_mismatch`)
  warns and goes on.
* **Trust.** What a command's flags allow travels as one frozen :class:`TableTrust`
  value, from the CLI to :meth:`CostTable.load <servecal.costmodels.table.CostTable.load>`
  and every loader between (a sweep's :class:`RunSpec` carries it into worker
  processes); nothing reads it from, or writes it to, the environment.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servecal.util.errors import InputError

#: The table fields the content hash covers (what it answers with, and for what).
HASHED_FIELDS = ("axes", "between", "quantiles", "tail", "margin", "energy_j", "fingerprint")
HASH_PREFIX = "sha256:"
#: What identifies the device and model a table is valid for ("device" is the
#: device's name: a table applies to every GPU of a kind, not to one serial number).
FINGERPRINT_KEYS = ("device_name", "model", "model_hash", "dtype", "kv_dtype", "kv_layout", "tp")


class FingerprintMismatchWarning(UserWarning):
    """The table was measured on a different device or model than the one compared."""


class EditedTableError(InputError):
    """A table's numbers do not match its content hash."""


def content_hash(doc: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``doc``'s :data:`HASHED_FIELDS`."""
    part = {k: doc.get(k) for k in HASHED_FIELDS}
    text = json.dumps(part, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)
    return HASH_PREFIX + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class TableTrust:
    """How far a command trusts the cost tables it loads (its table flags).

    The default trusts nothing: an edited table, a table file without a content hash
    and a fingerprint mismatch are all refused.

    * ``allow_edited`` (``--allow-edited``): load a table whose numbers do not match
      its content hash, or that has none.
    * ``allow_mismatch`` (``--allow-mismatch``): warn on, instead of refusing, a
      fingerprint mismatch.
    * ``strict`` (``--strict``): refuse a mismatch even under ``allow_mismatch``
      (refusing is the default; the flag is accepted so scripts keep working).
    """

    allow_edited: bool = False
    allow_mismatch: bool = False
    strict: bool = False

    @property
    def refuse_mismatch(self) -> bool:
        """Whether a fingerprint mismatch is refused (else it warns)."""
        return self.strict or not self.allow_mismatch


#: What a loader given no trust assumes: nothing.
NO_TRUST = TableTrust()


def check_content_hash(
    doc: Mapping[str, Any], recomputed: str, source: str, allow_edited: bool = False
) -> None:
    """Refuse a table whose stored ``content_hash`` differs from ``recomputed``.

    A document without one is left to :func:`check_hash_present` (a file must have
    one; a table built in memory is hashed when it is saved).
    """
    stored = doc.get("content_hash")
    if stored is None:
        return
    if not isinstance(stored, str) or not stored.startswith(HASH_PREFIX):
        raise InputError(f"{source}: field 'content_hash': expected 'sha256:<hex>'")
    if stored != recomputed and not allow_edited:
        raise EditedTableError(
            f"{source}: content hash mismatch: its numbers were changed after it was written "
            "(refit it, or pass --allow-edited to load it anyway)"
        )


def check_hash_present(doc: Mapping[str, Any], source: str, allow_edited: bool = False) -> None:
    """Refuse a table file without a ``content_hash`` (its numbers cannot be checked:
    a deleted hash must not hide an edit) unless ``allow_edited``."""
    if isinstance(doc, Mapping) and doc.get("content_hash") is None and not allow_edited:
        raise EditedTableError(
            f"{source}: no content_hash, so its numbers cannot be checked against what was "
            "fitted (refit it, or pass --allow-edited to load it anyway)"
        )


def _identity(fp: Mapping[str, Any]) -> dict[str, Any]:
    """``fp``'s identity keys; ``tp`` always (a fingerprint without one was measured
    at TP 1)."""
    out = {k: fp.get(k) for k in FINGERPRINT_KEYS}
    tp = fp.get("tp")
    out["tp"] = tp if isinstance(tp, int) and not isinstance(tp, bool) and tp >= 1 else 1
    return out


def fingerprint_diff(table_fp: Mapping[str, Any], other_fp: Mapping[str, Any]) -> list[str]:
    """Keys of :data:`FINGERPRINT_KEYS` present (not null) in both whose values differ
    (``tp`` is compared always: a missing one is TP 1)."""
    a, b = _identity(table_fp), _identity(other_fp)
    return [
        k
        for k in FINGERPRINT_KEYS
        if a[k] is not None and b[k] is not None and str(a[k]) != str(b[k])
    ]


def compare_fingerprints(
    table_fp: Mapping[str, Any],
    other_fp: Mapping[str, Any] | None,
    table_name: str,
    other_name: str,
    strict: bool = True,
) -> str | None:
    """Warn (:class:`FingerprintMismatchWarning`) or, if ``strict`` (the default;
    :attr:`TableTrust.refuse_mismatch`), raise on a mismatch.

    Returns the one-line message, or None when the fingerprints agree (or one side
    has none of the keys).
    """
    if not other_fp:
        return None
    diff = fingerprint_diff(table_fp, other_fp)
    if not diff:
        return None
    a, b = _identity(table_fp), _identity(other_fp)
    detail = ", ".join(f"{k} {a[k]!r} vs {b[k]!r}" for k in diff)
    message = f"fingerprint mismatch between {table_name} and {other_name} ({detail})"
    if strict:
        raise InputError(message + "; refused (pass --allow-mismatch to use it anyway)")
    warnings.warn(message, FingerprintMismatchWarning, stacklevel=2)
    return message
