"""One way to name an extension: a built-in ``NAME`` or a user's ``module:attr``.

Every extension point (policies, routers, truths, predictors, importers, exporters)
is a :class:`Registry`: one line per built-in, each naming its object by import
path so that listing names costs nothing and a run imports only what it uses. A
spec is

* ``NAME`` or ``NAME:ARG`` for a built-in (``samples:PATH``), ``NAME-N`` where the
  built-in takes a number (``fixed-512``: the entry's ``number`` option), or
* ``module.sub:attr`` or ``module.sub:attr:ARG`` for an object in the user's own
  module (on ``sys.path``), which must follow the kind's protocol (docs/plugins.md).

A built-in is an :class:`Entry`, or any object with its fields and ``describe()``
(a policy's entry adds its backends, options and presets). ``servecal plugins
[KIND]`` lists every registry's names.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from servecal.util.errors import InputError

#: ``module.sub:attr`` (a Python module path, then an attribute path) at a spec's start.
_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, SystemExit):
        return f"called exit({exc.code!r})"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _import_error(path: str, exc: BaseException | str) -> InputError:
    what = exc if isinstance(exc, str) else _describe(exc)
    return InputError(f"{path}: import: {what}")


def load_object(
    path: str,
    what: str = "plugin",
    error: Callable[[str, BaseException | str], Exception] = _import_error,
) -> Any:
    """``module.sub:Name`` (or ``module.sub:Outer.Name``) → the object.

    Whatever the module raises while it imports (``exit()`` included) becomes the
    one-line error ``error(path, reason)`` makes, so a user's broken module is an
    input error, never a traceback."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{what} {path!r}: expected MODULE:NAME, e.g. mypkg.mymodule:Name")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise error(path, f"cannot import {module_name!r} ({exc})") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module, any failure
        raise error(path, exc) from None
    for part in attr.split("."):
        try:
            found = hasattr(obj, part)
            obj = getattr(obj, part) if found else obj
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a module's own __getattr__
            raise error(path, exc) from None
        if not found:
            raise error(path, f"{module_name!r} has no {attr!r}")
    return obj


def is_import_path(spec: str) -> bool:
    """Whether ``spec`` starts with ``module:attr`` (not a built-in ``NAME:ARG``)."""
    return _IMPORT_PATH.match(spec) is not None


class Named(Protocol):
    """What a registry keeps per built-in (:class:`Entry`, or a richer one)."""

    name: str
    summary: str

    @property
    def target(self) -> str: ...  # "module:attr", imported on use

    @property
    def usage(self) -> str: ...  # how a user writes it ("samples:PATH", "fixed-N")

    @property
    def number(self) -> str | None: ...  # the option a "NAME-N" suffix sets, if any

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Entry:
    """One built-in: its name, the object's import path, and how a user writes it."""

    name: str
    target: str  # "module:attr", imported on use
    summary: str
    usage: str = ""  # e.g. "samples:PATH"; default: the name
    number: str | None = None  # the option a "NAME-N" suffix sets

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "usage": self.usage or self.name, "summary": self.summary}


@dataclass(frozen=True)
class Found:
    """What a spec names: the loaded object, the text after it, and its built-in entry
    (``None`` for a user's ``module:attr``)."""

    obj: Any
    arg: str
    entry: Named | None
    name: str  # the built-in's name or the import path


@dataclass
class Registry:
    """The names of one kind of extension (see the module docstring).

        ``contract`` is the kind's protocol in one line (shown by ``servecal plugins``
        and in errors); ``flag`` is the option users name it with; ``user_form`` how a
        user's object is written (``MODULE:ATTR``; ``""``: the kind takes built-ins only,
    or a file's path where ``contract`` says so). With ``takes_arg`` false a spec with
        a colon is all import path (a policy class takes options, not ``:ARG``), and
        whatever fails to import it says so through ``import_error``."""

    kind: str
    flag: str
    contract: str
    entries: dict[str, Named] = field(default_factory=dict)
    user_form: str = "MODULE:ATTR"
    takes_arg: bool = True
    import_error: Callable[[str, BaseException | str], Exception] = _import_error

    def add(self, name: str, target: str, summary: str, usage: str = "") -> None:
        """Register a built-in (one line per built-in where the kind is defined)."""
        self.add_entry(Entry(name, target, summary, usage))

    def add_entry(self, entry: Named) -> None:
        """Register a built-in given as an entry object (a richer kind's own)."""
        if entry.name in self.entries or ":" in entry.name:
            raise ValueError(f"{self.kind} name {entry.name!r} is taken or has a ':'")
        self.entries[entry.name] = entry

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[Named]:
        return iter(self.entries.values())

    def names(self) -> tuple[str, ...]:
        return tuple(self.entries)

    def usages(self) -> str:
        """``a, b:PATH, ..., or MODULE:ATTR``: what the flag accepts, for help and errors."""
        names = ", ".join(e.usage or e.name for e in self)
        return f"{names}, or {self.user_form}" if self.user_form else names

    def lookup(self, name: str) -> tuple[Named, dict[str, int]] | None:
        """The built-in ``name`` names and the option its ``-N`` suffix sets
        (``fixed-512``: ``{"chunk": 512}``); ``None`` when it names none."""
        entry = self.entries.get(name)
        if entry is not None:
            return entry, {}
        prefix, _, value = name.rpartition("-")
        entry = self.entries.get(prefix)
        if entry is not None and entry.number is not None and value.isdigit():
            return entry, {entry.number: int(value)}
        return None

    def error(self, spec: str) -> InputError:
        """The one-line error for a spec that names nothing of this kind."""
        return InputError(f"{self.flag} {spec!r}: expected {self.usages()}")

    def split(self, spec: str) -> tuple[Named | None, str, str]:
        """``(entry, import path, arg)`` of a spec; one-line error for an unknown name."""
        if not self.takes_arg and ":" in spec:
            return None, spec, ""
        name, _, arg = spec.partition(":")
        hit = self.lookup(name)
        if hit is not None:
            return hit[0], hit[0].target, arg
        match = _IMPORT_PATH.match(spec)
        if match is None or match.end() < len(spec) and spec[match.end()] != ":":
            raise self.error(spec)
        return None, match.group(0), spec[match.end() + 1 :]

    def load(self, path: str) -> Any:
        """The object at import path ``path``; failures as this kind's one-line error."""
        return load_object(path, self.flag, self.import_error)

    def find(self, spec: str) -> Found:
        """The object ``spec`` names (imported now) and the text after it."""
        entry, target, arg = self.split(spec)
        return Found(self.load(target), arg, entry, entry.name if entry else target)

    def call(self, spec: str, *args: Any) -> Any:
        """Load what ``spec`` names and call it with ``args`` (the kind's protocol).

        A built-in's errors are its own; whatever a user's object raises (or that it
        is not callable) becomes one line naming the spec, like an import failure."""
        found = self.find(spec)
        if found.entry is not None:
            return found.obj(*args)
        if not callable(found.obj):
            raise InputError(f"{self.flag} {spec}: {found.name} is not callable ({self.contract})")
        try:
            return found.obj(*args)
        except InputError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code, any failure
            raise InputError(f"{self.flag} {spec}: {_describe(exc)}") from None

    def listing(self) -> list[dict[str, Any]]:
        return [e.describe() for e in self]
