"""Parse and check a ``servecal.costtable/1`` document (docs/costtable.md).

Kept apart from :mod:`table` so that the fast query code stays short; like it, this
imports only the standard library and numpy. Every defect is one :class:`InputError`
line naming the source and the field.
"""

from __future__ import annotations

import math
from typing import Any

from servecal.util.errors import InputError

REQUIRED = (
    "schema",
    "fingerprint",
    "axis_order",
    "axes",
    "between",
    "beyond",
    "quantiles",
    "tail",
    "margin",
    "energy_j",
)


#: Largest magnitude a grid number may have (integers beyond it lose precision as floats).
MAX_NUMBER = 2.0**53


#: Largest tensor-parallel degree a table may record (profiler.shapes.MAX_TP).
MAX_TABLE_TP = 1024


def _num_list(value: Any, source: str, name: str) -> list[float]:
    # checked per distinct type and with C-level maps: a table holds ~20,000 numbers
    # and every command that loads one pays this (4.1 -> 1.5 ms on the A100 table:
    # docs/results/2026-12-04-vidur-side-by-side.md)
    if not isinstance(value, list) or not all(
        k is not bool and issubclass(k, (int, float)) for k in set(map(type, value))
    ):
        raise InputError(f"{source}: field '{name}': must be a list of numbers")
    try:  # a huge JSON integer would overflow float(): isfinite raises, compare as numbers
        finite = all(map(math.isfinite, value))
    except OverflowError:
        finite = False
    if not finite or (value and max(map(abs, value)) > MAX_NUMBER):
        raise InputError(f"{source}: field '{name}': non-finite or too large value")
    return list(map(float, value))


def parse_document(cls: type, doc: Any, source: str) -> Any:
    """Check ``doc`` field by field and build ``cls`` (a :class:`CostTable`) from it."""
    from servecal.costmodels.table import AXES

    _check_header(doc, source)
    axes = _parse_axes(doc["axes"], source)
    parsed = _parse_quantiles(doc["quantiles"], source)
    energy = doc["energy_j"]
    if energy is not None:
        energy = _num_list(energy, source, "energy_j")
    _check_metadata(doc, source)
    margin = _parse_margin(doc["margin"], source)
    tp = _parse_tp(doc.get("tp"), source)
    tail = doc["tail"]
    if tail != (margin.quantile if margin else None):
        raise InputError(f"{source}: field 'tail': {tail!r} does not match the margin")
    try:
        table = cls(
            axes=axes,
            quantiles=parsed,
            margin=margin,
            energy_j=energy,
            fingerprint=doc["fingerprint"],
            model=doc.get("model"),
            validation=doc.get("validation"),
            created=doc.get("created"),
            between=doc["between"],
            tp=tp,
        )
    except (ValueError, OverflowError) as exc:
        raise InputError(f"{source}: {exc}") from None
    domain = doc.get("domain")
    if domain is not None and domain != {a: [lo, hi] for a, (lo, hi) in table.domain.items()}:
        raise InputError(f"{source}: field 'domain': does not match the axes")
    _check_working_cells(axes, parsed, AXES, source)
    return table


def _check_header(doc: Any, source: str) -> None:
    """A JSON object of this schema with every required field, the axis order and the
    between/beyond rules this loader implements."""
    from servecal.costmodels.table import AXES, BETWEEN_RULES, BEYOND_RULE, COSTTABLE_SCHEMA

    if not isinstance(doc, dict):
        raise InputError(f"{source}: not a cost table: top level is not a JSON object")
    schema = doc.get("schema")
    if schema != COSTTABLE_SCHEMA:
        raise InputError(
            f"{source}: field 'schema': wrong schema {schema!r}, expected '{COSTTABLE_SCHEMA}'"
        )
    for key in REQUIRED:
        if key not in doc:
            raise InputError(f"{source}: field '{key}': missing")
    if doc["axis_order"] != list(AXES):
        raise InputError(f"{source}: field 'axis_order': must be {list(AXES)}")
    if doc["between"] not in BETWEEN_RULES or doc["beyond"] != BEYOND_RULE:
        raise InputError(
            f"{source}: field 'between'/'beyond': this loader implements "
            f"{'|'.join(BETWEEN_RULES)}/'{BEYOND_RULE}', got {doc['between']!r}/{doc['beyond']!r}"
        )


def _parse_axes(axes: Any, source: str) -> dict[str, list[int]]:
    """Exactly the table's axes, each a list of integers in [0, 2^53]."""
    from servecal.costmodels.table import AXES

    if not isinstance(axes, dict) or set(axes) != set(AXES):
        raise InputError(f"{source}: field 'axes': must have exactly {list(AXES)}")
    for name in AXES:
        vals = axes[name]
        if not isinstance(vals, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in vals
        ):
            raise InputError(f"{source}: field 'axes.{name}': must be a list of integers")
        if any(v < 0 or v > MAX_NUMBER for v in vals):
            raise InputError(f"{source}: field 'axes.{name}': values must be in [0, 2^53]")
    return axes


def _parse_quantiles(quantiles: Any, source: str) -> dict[float, list[float]]:
    """A non-empty object from quantile (a number as text) to a list of numbers."""
    if not isinstance(quantiles, dict) or not quantiles:
        raise InputError(f"{source}: field 'quantiles': must be a non-empty object")
    parsed: dict[float, list[float]] = {}
    for key, values in quantiles.items():
        try:
            q = float(key)
        except ValueError:
            raise InputError(f"{source}: field 'quantiles': key {key!r} is not a number") from None
        parsed[q] = _num_list(values, source, f"quantiles.{key}")
    return parsed


def _check_metadata(doc: dict[str, Any], source: str) -> None:
    """The optional fields the loader keeps as they are have the right JSON type."""
    if "content_hash" in doc and not isinstance(doc["content_hash"], str):
        raise InputError(f"{source}: field 'content_hash': must be a string")
    for key in ("fingerprint", "model", "validation"):
        if not isinstance(doc.get(key, {}), dict):
            raise InputError(f"{source}: field '{key}': must be an object")


def _parse_margin(raw: Any, source: str) -> Any:
    """The table's :class:`Margin`, or ``None`` (the field is null)."""
    from servecal.costmodels.table import Margin

    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InputError(f"{source}: field 'margin': must be an object or null")
    try:
        return Margin(**raw)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"{source}: field 'margin': {exc}") from None


def _parse_tp(tp: Any, source: str) -> int | None:
    """The tensor-parallel degree, or ``None``: a table without ``tp`` was measured at TP 1."""
    if tp is not None and (
        not isinstance(tp, int) or isinstance(tp, bool) or not 1 <= tp <= MAX_TABLE_TP
    ):
        raise InputError(
            f"{source}: field 'tp': must be an integer in 1..{MAX_TABLE_TP}, got {tp!r}"
        )
    return tp


def _check_working_cells(
    axes: dict[str, list[int]], quantiles: dict[float, list[float]], order: tuple[str, ...],
    source: str,
) -> None:  # fmt: skip
    """An iteration that does work (a decode or a prefill token) takes time: a cell of
    0 ms (or less) there is a broken fit, not a fast device."""
    import numpy as np

    shape = tuple(len(axes[a]) for a in order)
    grids = np.meshgrid(*(np.asarray(axes[a]) for a in order), indexing="ij")
    work = (grids[order.index("n_decode")] + grids[order.index("chunk")]) >= 1
    for q, values in quantiles.items():
        cells = np.asarray(values, dtype=float)
        if cells.size != work.size:
            return  # the constructor has refused a wrong length already
        bad = np.flatnonzero((cells.reshape(shape) <= 0) & work)
        if bad.size:
            at = np.unravel_index(int(bad[0]), shape)
            where = ", ".join(f"{a} {axes[a][i]}" for a, i in zip(order, at, strict=True))
            raise InputError(
                f"{source}: field 'quantiles.{q:g}': {bad.size} cells of <= 0 ms where an "
                f"iteration does work (first at {where}): a broken fit; refit it"
            )
