"""A policy's options: read from its class, parsed from ``key=value`` text, checked.

A policy is built as ``Class(**options)``. Its options are the fields of a frozen
dataclass (the class itself for most built-ins, or one its registry entry names,
e.g. :class:`~servecal.sched.policies.sloweave.SLOWeaveConfig`), or, for a plain
class, the keyword parameters of its constructor. Values given as text
(``--opt aging_ms=500``) are converted to the annotated type (``int``, ``float``,
``bool``, ``str``, any of them ``| None``); a bad key or value is one
:class:`InputError` line.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servecal.util.errors import InputError

_NO_DEFAULT = inspect.Parameter.empty
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


@dataclass(frozen=True)
class Option:
    """One option: its name, type (``int``/``float``/``bool``/``str``), whether
    ``None`` is allowed, and its default (``inspect.Parameter.empty``: required)."""

    name: str
    kind: type
    optional: bool
    default: Any

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT

    def describe(self) -> str:
        """``name: type = default`` for listings."""
        kind = self.kind.__name__ + (" | None" if self.optional else "")
        return self.name + f": {kind}" + ("" if self.required else f" = {self.default!r}")

    def parse(self, text: str, owner: str) -> Any:
        """``text`` as this option's type; a bad value is one :class:`InputError` line."""
        raw = text.strip()
        if self.optional and raw.lower() in ("none", "null", "off", ""):
            return None
        try:
            if self.kind is bool:
                if raw.lower() in _TRUE:
                    return True
                if raw.lower() in _FALSE:
                    return False
                raise ValueError(raw)
            if self.kind is int:
                return int(raw)
            if self.kind is float:
                return float(raw)
            return raw
        except ValueError:
            word = {bool: "true or false", int: "a whole number", float: "a number"}
            raise InputError(
                f"--opt {self.name}={text}: {owner}'s {self.name} takes "
                f"{word.get(self.kind, self.kind.__name__)}" + (" or none" if self.optional else "")
            ) from None


def _kind_of(annotation: Any) -> tuple[type, bool]:
    """``(base type, optional)`` of an annotation such as ``float | None``."""
    optional = False
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        annotation = args[0] if len(args) == 1 else str
    if annotation in (int, float, bool, str):
        return annotation, optional
    return str, optional


def options_of(cls: type) -> tuple[Option, ...]:
    """The options ``cls`` takes: a dataclass's ``init`` fields, else the keyword
    parameters of its constructor (``self``, ``*args`` and ``**kwargs`` excluded)."""
    try:
        hints = typing.get_type_hints(cls) if dataclasses.is_dataclass(cls) else {}
    except Exception:  # unresolvable annotations: treat every option as text
        hints = {}
    if dataclasses.is_dataclass(cls):
        out = []
        for f in dataclasses.fields(cls):
            if not f.init or f.name.startswith("_"):
                continue
            kind, optional = _kind_of(hints.get(f.name, str))
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = _NO_DEFAULT
            out.append(Option(f.name, kind, optional, default))
        return tuple(out)
    try:
        signature = inspect.signature(cls)
        init_hints = typing.get_type_hints(cls.__init__)
    except (TypeError, ValueError, NameError):
        return ()
    out = []
    for p in signature.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name.startswith("_"):
            continue
        kind, optional = _kind_of(init_hints.get(p.name, str))
        out.append(Option(p.name, kind, optional, p.default))
    return tuple(out)


def parse_options(
    options: tuple[Option, ...], given: Mapping[str, str], owner: str
) -> dict[str, Any]:
    """Typed values of the ``given`` text options, checked against ``options``."""
    known = {o.name: o for o in options}
    values: dict[str, Any] = {}
    for key, text in given.items():
        option = known.get(key)
        if option is None:
            names = ", ".join(known) or "none"
            raise InputError(
                f"--opt {key}={text}: {owner} has no option {key!r} (options: {names})"
            )
        values[key] = option.parse(text, owner)
    missing = [o.name for o in options if o.required and o.name not in values]
    if missing:
        raise InputError(f"policy {owner} needs --opt {missing[0]}=VALUE")
    return values


def split_assignments(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["a=1", "b=x"]`` → ``{"a": "1", "b": "x"}``; a pair without ``=`` is an error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--opt {pair!r}: expected KEY=VALUE, e.g. --opt aging_ms=500")
        out[key.strip()] = value
    return out
