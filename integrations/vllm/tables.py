"""Load the plug-in's cost table strictly, and check it was measured for the served model.

Stricter than :meth:`CostTable.load` because a table on a production server is
not looked at by a person: a field this servecal does not write means the file
came from another version or was edited, and a table calibrated for another
model shape would plan every step on the wrong costs. Both stop the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servecal.costmodels.table import CostTable, read_table_document
from servecal.integrations.vllm.config import PluginConfigError
from servecal.util.errors import InputError

#: Model-shape fields of a table fingerprint (``fingerprint.model_shape``) and the
#: Hugging Face config attributes they correspond to, first found wins.
SHAPE_FIELDS: dict[str, tuple[str, ...]] = {
    "n_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "n_heads": ("num_attention_heads", "n_head"),
    "n_kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "intermediate": ("intermediate_size", "ffn_dim"),
    "vocab": ("vocab_size",),
}


def load_table(path: Path, quantile: float, use_margin: bool) -> CostTable:
    """The cost table at ``path``; any defect is one :class:`PluginConfigError` line."""
    try:
        doc = read_table_document(path)
        table = CostTable.from_json(doc, str(path))
    except InputError as exc:
        raise PluginConfigError(str(exc)) from None
    # what this servecal writes is what it knows: anything else is refused
    unknown = sorted(set(doc) - set(table.to_json()))
    if unknown:
        raise PluginConfigError(
            f"cost table {path}: unknown field '{unknown[0]}' "
            "(written by another servecal version, or edited by hand)"
        )
    if quantile not in table.quantiles:
        have = ", ".join(f"{q:g}" for q in table.quantiles)
        raise PluginConfigError(
            f"cost table {path} has no quantile {quantile:g} to plan on (it has {have})"
        )
    if use_margin and table.margin_info is None:
        raise PluginConfigError(
            f"cost table {path} has no calibrated margin (fitted from medians only); "
            'refit on repeated measurements, or set "use_margin": false and "quantile": 0.5'
        )
    return table


def served_shape(hf_config: Any) -> dict[str, int]:
    """The served model's shape in :class:`ModelShape` terms, from its HF config."""
    shape: dict[str, int] = {}
    for name, attrs in SHAPE_FIELDS.items():
        for attr in attrs:
            value = getattr(hf_config, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                shape[name] = value
                break
    if "head_dim" not in shape and "hidden" in shape and shape.get("n_heads"):
        shape["head_dim"] = shape["hidden"] // shape["n_heads"]
    if "n_kv_heads" not in shape and "n_heads" in shape:
        shape["n_kv_heads"] = shape["n_heads"]  # multi-head attention: one KV head per head
    return shape


def model_mismatch(
    fingerprint: Mapping[str, Any], served: Mapping[str, int], served_dtype: str | None = None
) -> list[str] | None:
    """Differences between the table's model and the served one, ``"field: table X, served
    Y"``; ``None`` when the fingerprint records no model shape (nothing to compare)."""
    shape = fingerprint.get("model_shape")
    if not isinstance(shape, Mapping):
        return None
    diff = [
        f"{k}: table {shape[k]}, served {served[k]}"
        for k in SHAPE_FIELDS
        if k in shape and k in served and shape[k] != served[k]
    ]
    table_dtype = fingerprint.get("dtype")
    if served_dtype is not None and table_dtype is not None and str(table_dtype) != served_dtype:
        diff.append(f"dtype: table {table_dtype}, served {served_dtype}")
    return diff


def check_model(
    table: CostTable,
    path: Path,
    hf_config: Any,
    served_dtype: str | None,
    served_name: str,
) -> str | None:
    """Raise if ``table`` was calibrated for another model; return a warning line when
    it cannot tell (no model shape in the fingerprint), else None."""
    diff = model_mismatch(table.fingerprint, served_shape(hf_config), served_dtype)
    if diff is None:
        return f"cost table {path} records no model shape; cannot check it against {served_name}"
    if diff:
        raise PluginConfigError(
            f"cost table {path} was calibrated for another model than {served_name} "
            f'({"; ".join(diff)}); calibrate this model, or set "check_model": false'
        )
    return None
