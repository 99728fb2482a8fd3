"""Reading the small JSON/TOML files users hand the profiler (model shapes, grids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servecal.costmodels.jsontext import DuplicateKeyError, loads_unique
from servecal.util.errors import InputError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: TOML needs 3.11's tomllib; JSON always works
    tomllib = None


def load_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """The top-level table of a ``.json`` or ``.toml`` file; InputError naming the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what} ({exc.strerror})") from None
    if path.suffix == ".toml":
        if tomllib is None:
            raise InputError(f"{path}: TOML needs Python 3.11 or newer; write the {what} as JSON")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"{path}: not valid TOML: {exc}") from None
        except RecursionError:
            raise InputError(f"{path}: not a {what}: nested too deeply") from None
    else:
        try:
            data = loads_unique(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not valid JSON: {exc}") from None
        except DuplicateKeyError as exc:
            raise InputError(f"{path}: not a {what}: {exc}") from None
        except RecursionError:
            raise InputError(f"{path}: not a {what}: nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a {what} must be a JSON object / TOML table of fields")
    return data
