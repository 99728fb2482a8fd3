"""A user's policy (``--policy MODULE:CLASS``) fails as one line, never a traceback.

Built-in policies are the project's code: a bug there should show its traceback.
A policy loaded by import path is the user's: whatever it does wrong — its module
does not import (a ``SyntaxError``, an exception or ``exit()`` at import), its
constructor raises, ``plan``/``decide``/``observe``/``summary`` raise, ``plan``
returns something that is not a :class:`~servecal.sched.plan.Plan` or a plan whose
token counts are not whole numbers, ``summary`` returns something JSON cannot hold
— becomes one :class:`PolicyError` (an ``InputError``: ``error: policy MOD:CLASS:
METHOD: ...``, exit 2) naming the method.

:func:`guarded` wraps the user's class in a subclass whose methods check this; the
engine and driver call it exactly as they would the class (built-ins pay nothing).
"""

from __future__ import annotations

import functools
import json
import numbers
from collections.abc import Callable
from typing import Any

from servecal.util.errors import InputError


class PolicyError(InputError):
    """A user's policy failed; the message names the policy and the method."""


def describe(exc: BaseException) -> str:
    """``Type: message`` of what a user's code raised, on one line."""
    text = " ".join(str(exc).split())
    if isinstance(exc, SystemExit):
        return f"called exit({exc.code!r})"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failure(path: str, method: str, exc: BaseException | str) -> PolicyError:
    what = exc if isinstance(exc, str) else describe(exc)
    return PolicyError(f"policy {path}: {method}: {what}")


def _is_count(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _ids(value: Any, field: str, optional: bool = False) -> str | None:
    if optional and value is None:
        return None
    if not isinstance(value, tuple | list) or not all(_is_count(v) for v in value):
        return f"Plan.{field} must be a tuple of request ids (whole numbers), got {value!r:.80}"
    return None


def plan_problem(plan: Any) -> str | None:
    """Why ``plan`` is not a Plan the engine can check, or ``None``."""
    from servecal.sched.plan import Plan

    if not isinstance(plan, Plan):
        return f"returned {type(plan).__name__}, expected a Plan"
    for field in ("preempt", "park", "reject", "exceptions"):
        problem = _ids(getattr(plan, field), field)
        if problem:
            return problem
    problem = _ids(plan.decode, "decode", optional=True)
    if problem:
        return problem
    problem = chunks_problem(plan.prefill, "Plan.prefill")
    if problem:
        return problem
    budget = plan.budget_ms
    if not isinstance(budget, numbers.Real) or isinstance(budget, bool):
        return f"Plan.budget_ms must be a number of ms, got {budget!r:.80}"
    return None


def chunks_problem(chunks: Any, field: str) -> str | None:
    """Why ``chunks`` is not ``((rid, tokens), ...)`` of whole numbers, or ``None``."""
    if not isinstance(chunks, tuple | list):
        return f"{field} must be a tuple of (rid, tokens), got {type(chunks).__name__}"
    for chunk in chunks:
        if not (isinstance(chunk, tuple | list) and len(chunk) == 2):
            return f"{field} must hold (rid, tokens) pairs, got {chunk!r:.80}"
        if not all(_is_count(v) for v in chunk):
            return f"{field} token counts and ids must be whole numbers, got {chunk!r:.80}"
    return None


def decision_problem(decision: Any) -> str | None:
    from servecal.sched.flowprefill.decision import Decision

    if not isinstance(decision, Decision):
        return f"returned {type(decision).__name__}, expected a Decision"
    return chunks_problem(decision.run, "Decision.run")


def summary_problem(summary: Any) -> str | None:
    if not isinstance(summary, dict):
        return f"returned {type(summary).__name__}, expected a dict"
    try:
        json.dumps(summary, allow_nan=True)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"returned a dict JSON cannot hold ({describe(exc)})"
    return None


def observe_problem(columns: Any) -> str | None:
    if columns is None or isinstance(columns, dict):
        return None
    return f"returned {type(columns).__name__}, expected a dict of columns or None"


def route_problem(index: Any) -> str | None:
    import numbers

    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        return f"returned {type(index).__name__}, expected a replica's index (an int)"
    return None


#: The methods checked, and what each result must be (``None``: anything).
CHECKS: dict[str, Callable[[Any], str | None]] = {
    "plan": plan_problem,
    "decide": decision_problem,
    "observe": observe_problem,
    "summary": summary_problem,
    "route": route_problem,
}


def _wrap(path: str, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    check = CHECKS[name]

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = method(self, *args, **kwargs)
        except PolicyError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code, any failure
            raise failure(path, name, exc) from None
        problem = check(result)
        if problem is not None:
            raise failure(path, name, problem)
        return result

    return call


def _init(path: str, cls: type) -> Callable[..., None]:
    original = cls.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            original(self, *args, **kwargs)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code
            raise failure(path, "__init__", exc) from None

    return init


def guarded(path: str, cls: type) -> type:
    """A subclass of the user's ``cls`` (``path``: how it was named) whose constructor
    and policy methods fail as one :class:`PolicyError` line (see the module)."""
    body: dict[str, Any] = {"__init__": _init(path, cls), "__module__": cls.__module__}
    for name in CHECKS:
        method = getattr(cls, name, None)
        if callable(method):
            body[name] = _wrap(path, name, method)
    try:
        return type(cls.__name__, (cls,), body)
    except Exception:  # noqa: BLE001 - a class that cannot be subclassed runs as it is
        return cls


def import_failure(path: str, exc: BaseException) -> PolicyError:
    """A user's module that would not import, as one line."""
    return failure(path, "import", exc)
