"""Every built-in policy and router name, each a :class:`~servecal.plugins.Registry`
(``POLICIES``, ``ROUTERS``), and user classes by import path.

Each :class:`PolicyEntry` names the class per backend it runs on (``engine``:
``plan(view, predictor) -> Plan``; ``operator-driver``: ``decide(view, predictor) ->
Decision``; ``router``: ``route(request, replicas) -> int``), and where its options
come from. A policy is built as ``Class(**options)``; its options are the fields of
the class (a frozen dataclass) unless the entry names another dataclass
(``options=``). Classes are named by import path and imported on use, so listing a
name costs nothing and a run imports only the policy it runs.

A name may fix some options (``preset``: ``sloweave-p50`` is ``sloweave`` planning
on P50 without margin) or take one number as a suffix (``number``: ``fixed-512``
sets ``chunk=512``). Anything else is ``--opt key=value``.

User policies and routers load by import path, like vLLM's ``--scheduler-cls``:
``mypkg.mymodule:MyPolicy``, a class with ``plan`` (engine), ``decide`` (operator
driver) or ``route`` (router) whose constructor's keyword arguments are its options
(docs/policies.md, docs/plugins.md). Policy and router names share one namespace (a
router named as a policy is refused by what it runs on). Adding a built-in is one
file and one line below: ``POLICIES.add_entry(PolicyEntry(...))`` or
``ROUTERS.add_entry(...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from servecal import plugins
from servecal.sched.policies.guard import PolicyError, failure, guarded, import_failure
from servecal.sched.policies.options import Option, options_of
from servecal.util.errors import InputError

ENGINE = "engine"
DRIVER = "operator-driver"
#: A cluster's global router (sched/cluster/): not a scheduler, but named, optioned and
#: loaded by ``module:Class`` the same way.
ROUTER = "router"
#: What a policy class must have to run on each backend.
INTERFACES = {
    ENGINE: "plan(view, predictor) -> Plan",
    DRIVER: "decide(view, predictor) -> Decision",
    ROUTER: "route(request, replicas) -> int",
}

_P = "servecal.sched.policies"
_F = "servecal.sched.flowprefill.policies"
_R = "servecal.sched.cluster.routers"


@dataclass(frozen=True)
class PolicyEntry:
    """One built-in policy or router name (see the module docstring); a registry
    entry (:class:`~servecal.plugins.Named`) whose listing resolves its options."""

    name: str
    summary: str
    backends: Mapping[str, str]  # backend -> "module:Class", in order of preference
    options: str | None = None  # "module:Dataclass"; default: the first backend's class
    number: str | None = None  # the option a "-N" suffix sets (fixed-512: chunk)
    preset: Mapping[str, Any] = field(default_factory=dict)
    baseline: bool = False  # a static baseline: a fixed chunking rule, no deadlines

    @property
    def target(self) -> str:
        return next(iter(self.backends.values()))

    @property
    def usage(self) -> str:
        return self.name + ("-N" if self.number else "")

    def describe(self) -> dict[str, Any]:
        """Name, how it is written, summary, backends, options (``name: type =
        default``, less those the name fixes) and the options the name fixes."""
        found = _find(self.name)
        fixed_names = {*self.preset, self.number}
        return {
            "name": self.name,
            "usage": self.usage,
            "summary": self.summary,
            "backends": list(self.backends),
            "options": [
                o.describe() for o in options_of(found.options_cls) if o.name not in fixed_names
            ],
            "fixed": dict(self.preset) | ({self.number: "N"} if self.number else {}),
        }


_CONTRACT = "its constructor's keyword arguments are its options"
#: The built-in scheduling policies, one line each (classes imported on use).
POLICIES = plugins.Registry(
    "policy",
    "--policy",
    f"a class with {INTERFACES[ENGINE]} or {INTERFACES[DRIVER]}; {_CONTRACT}",
    user_form="MODULE:CLASS",
    takes_arg=False,
    import_error=import_failure,
)
#: A cluster's global routers (sched/cluster/), one line each.
ROUTERS = plugins.Registry(
    "router",
    "routers = [...] in a cluster space",
    f"a class with {INTERFACES[ROUTER]}; {_CONTRACT}",
    user_form="MODULE:CLASS",
    takes_arg=False,
    import_error=import_failure,
)

# fmt: off
POLICIES.add_entry(PolicyEntry("fixed", "a prefill chunk of `chunk` tokens beside all decodes (Sarathi-Serve)", {ENGINE: f"{_P}.static:FixedChunk"}, number="chunk", baseline=True))  # noqa: E501
POLICIES.add_entry(PolicyEntry("budget", "vLLM's token budget: decodes first, then prompts in `order` (fcfs|edf)", {ENGINE: f"{_P}.budget:TokenBudget", DRIVER: f"{_F}:TokenBudgetChunks"}, number="budget", baseline=True))  # noqa: E501
POLICIES.add_entry(PolicyEntry("fcfs-chunk", "`budget` in arrival order (FlowPrefill's chunked baseline)", {ENGINE: f"{_P}.budget:TokenBudget", DRIVER: f"{_F}:TokenBudgetChunks"}, number="budget", preset={"order": "fcfs"}, baseline=True))  # noqa: E501
POLICIES.add_entry(PolicyEntry("edf-chunk", "`budget` in TTFT-deadline order (FlowPrefill's chunked baseline)", {ENGINE: f"{_P}.budget:TokenBudget", DRIVER: f"{_F}:TokenBudgetChunks"}, number="budget", preset={"order": "edf"}, baseline=True))  # noqa: E501
POLICIES.add_entry(PolicyEntry("full", "the whole remaining prompt in one iteration, when it fits (no chunking)", {ENGINE: f"{_P}.static:FullPrefill"}, baseline=True))  # noqa: E501
POLICIES.add_entry(PolicyEntry("fcfs", "arrival order, whole prompts, short ones packed (DistServe-like); `full` on the engine", {DRIVER: f"{_F}:Fcfs", ENGINE: f"{_P}.static:FullPrefill"}, baseline=True))  # noqa: E501
POLICIES.add_entry(PolicyEntry("sloweave", "the largest chunk that ends before every decode deadline (P99 + margin)", {ENGINE: f"{_P}.sloweave:SLOWeave"}, options=f"{_P}.sloweave:SLOWeaveConfig"))  # noqa: E501
POLICIES.add_entry(PolicyEntry("sloweave-p50", "SLOWeave planning on P50 with no margin", {ENGINE: f"{_P}.sloweave:SLOWeave"}, options=f"{_P}.sloweave:SLOWeaveConfig", preset={"quantile": 0.5, "use_margin": False, "margin_control": "fixed"}))  # noqa: E501
POLICIES.add_entry(PolicyEntry("sloweave-fixed-margin", "SLOWeave planning on P99 + margin against the whole budget (the SLO control's baseline)", {ENGINE: f"{_P}.sloweave:SLOWeave"}, options=f"{_P}.sloweave:SLOWeaveConfig", preset={"margin_control": "fixed"}))  # noqa: E501
POLICIES.add_entry(PolicyEntry("sorted-f-online", "Sorted-F as a receding-horizon engine policy (clairvoyant lengths)", {ENGINE: "servecal.sched.sortedf.online:SortedFOnline"}))  # noqa: E501
POLICIES.add_entry(PolicyEntry("flowprefill", "operator-level preemption by sign(slack)/deadline, SLO-aware batching", {DRIVER: f"{_F}:FlowPrefill"}))  # noqa: E501
POLICIES.add_entry(PolicyEntry("flowprefill-nopreempt", "FlowPrefill's order and batching, decided only when the device is free", {DRIVER: f"{_F}:FlowPrefill"}, preset={"preemptive": False}))  # noqa: E501
POLICIES.add_entry(PolicyEntry("flowprefill-srpt", "FlowPrefill's operator preemption, shortest remaining prefill first", {DRIVER: f"{_F}:FlowPrefill"}, preset={"order": "srpt"}))  # noqa: E501
POLICIES.add_entry(PolicyEntry("flowprefill-nobatch", "FlowPrefill without SLO-aware batching", {DRIVER: f"{_F}:FlowPrefill"}, preset={"batching": False}))  # noqa: E501
ROUTERS.add_entry(PolicyEntry("round-robin", "router: replicas in turn", {ROUTER: f"{_R}:RoundRobin"}))  # noqa: E501
ROUTERS.add_entry(PolicyEntry("least-requests", "router: the replica with the fewest outstanding requests", {ROUTER: f"{_R}:LeastRequests"}))  # noqa: E501
ROUTERS.add_entry(PolicyEntry("least-tokens", "router: the replica with the fewest queued prompt tokens", {ROUTER: f"{_R}:LeastTokens"}))  # noqa: E501
ROUTERS.add_entry(PolicyEntry("prefix-affinity", "router: the replica holding the longest run of the prompt's cached blocks, unless its predicted TTFT breaks the SLO", {ROUTER: "servecal.sched.cluster.prefix_router:PrefixAffinity"}))  # noqa: E501
ROUTERS.add_entry(PolicyEntry("predicted-latency", "router: where the cost table's P99 + margin predicts TTFT and TPOT are met", {ROUTER: f"{_R}:PredictedLatency"}))  # noqa: E501
# fmt: on
#: Policy and router names share one namespace, looked up in this order.
KINDS = (POLICIES, ROUTERS)


def load_object(path: str, what: str = "--policy") -> Any:
    """``module.sub:Name`` (or ``module.sub:Outer.Name``) → the object; one-line errors
    naming the policy (whatever the module raises while it imports, ``exit()`` included)."""
    return plugins.load_object(path, what, import_failure)


@dataclass(frozen=True)
class ResolvedPolicy:
    """A policy name with its classes per backend and its checked option values."""

    name: str
    classes: Mapping[str, type]  # backend -> class, in order of preference
    options: tuple[Option, ...]
    values: Mapping[str, Any]  # options set by the name, a suffix or --opt
    baseline: bool = False
    takes: Mapping[str, frozenset[str]] = field(default_factory=dict)  # backend -> names

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(self.classes)

    def describe(self) -> dict[str, Any]:
        """Every option with its value (defaults filled in), for ``run.json``."""
        doc = {o.name: o.default for o in self.options if not o.required}
        doc.update(self.values)
        return doc

    def build(self, backend: str) -> Any:
        """A fresh policy object for ``backend`` (a policy may keep state per run)."""
        cls = self.classes.get(backend)
        if cls is None:
            raise InputError(
                f"policy {self.name} runs on {' or '.join(self.classes)}, not on the {backend}"
            )
        stray = sorted(set(self.values) - self.takes[backend])
        if stray:
            raise InputError(f"policy {self.name} on the {backend} has no option {stray[0]!r}")
        try:
            return cls(**self.values)
        except PolicyError:
            raise
        except ValueError as exc:
            raise InputError(f"policy {self.name}: {exc}") from None


def _entry_for(name: str) -> tuple[PolicyEntry, dict[str, Any]]:
    """The entry of ``name`` (a policy's or a router's) and what its ``-N`` suffix sets."""
    for registry in KINDS:
        hit = registry.lookup(name)
        if hit is not None:
            return hit  # type: ignore[return-value]  # PolicyEntry, by construction
    known = ", ".join(e.usage for registry in KINDS for e in registry)
    raise InputError(f"unknown policy {name!r}; known: {known}, or MODULE:CLASS")


def _user_policy(path: str) -> tuple[dict[str, type], type]:
    """A user's class by import path: ``(guarded class per backend, the class)``."""
    _, target, _ = POLICIES.split(path)  # all of it: a policy takes --opt, not :ARG
    cls = POLICIES.load(target)
    if not isinstance(cls, type):
        raise PolicyError(f"policy {path}: not a class")
    backends = ((ENGINE, "plan"), (DRIVER, "decide"), (ROUTER, "route"))
    try:
        methods = [(b, m) for b, m in backends if hasattr(cls, m)]
    except Exception as exc:  # noqa: BLE001 - a metaclass's own __getattr__
        raise failure(path, "class", exc) from None
    if not methods:
        raise PolicyError(
            f"policy {path}: a policy needs a method {INTERFACES[ENGINE]} (engine) "
            f"or {INTERFACES[DRIVER]} (operator driver); a router {INTERFACES[ROUTER]}"
        )
    safe = guarded(path, cls)
    return {b: safe for b, _ in methods}, cls


@dataclass(frozen=True)
class _Found:
    classes: dict[str, type]
    options_cls: type
    fixed: dict[str, Any]  # values the name sets (preset, -N suffix)
    baseline: bool
    user: bool
    named_options: bool = False  # the entry names its options dataclass

    def takes(self, backend: str) -> frozenset[str]:
        """Options the backend's class accepts: the named dataclass's (a user's: the
        class itself), else its own."""
        own = self.named_options or self.user
        cls = self.options_cls if own else self.classes[backend]
        return frozenset(o.name for o in options_of(cls))


@lru_cache(maxsize=256)
def _find(name: str) -> _Found:
    if ":" in name:
        classes, cls = _user_policy(name)
        return _Found(classes, cls, {}, baseline=False, user=True)
    entry, numbered = _entry_for(name)
    classes = {b: load_object(path, "policy class") for b, path in entry.backends.items()}
    options_cls = POLICIES.load(entry.options) if entry.options else next(iter(classes.values()))
    fixed = {**entry.preset, **numbered}
    return _Found(classes, options_cls, fixed, entry.baseline, False, entry.options is not None)


@lru_cache(maxsize=256)
def resolve(name: str, given: tuple[tuple[str, Any], ...] = ()) -> ResolvedPolicy:
    """Resolve a policy name (built-in, ``NAME-N``, or ``MODULE:CLASS``) with its typed
    ``--opt`` values (see :func:`parse_policy_options`); one-line errors."""
    found = _find(name)
    try:
        options = options_of(found.options_cls)
    except Exception as exc:  # noqa: BLE001 - only a user's class gets here
        raise failure(name, "options", exc) from None
    clash = sorted(set(found.fixed) & {k for k, _ in given})
    if clash:
        raise InputError(f"policy {name} fixes {clash[0]}; use its base name with --opt")
    values = {**found.fixed, **dict(given)}
    missing = [o.name for o in options if o.required and o.name not in values]
    if missing:
        raise InputError(f"policy {name} needs --opt {missing[0]}=VALUE")
    if not found.user:  # the options dataclass checks its values (its __post_init__)
        try:
            found.options_cls(**values)
        except ValueError as exc:
            raise InputError(f"policy {name}: {exc}") from None
    takes = {b: found.takes(b) for b in found.classes}
    return ResolvedPolicy(name, found.classes, options, values, found.baseline, takes)


def parse_policy_options(name: str, text: Mapping[str, str]) -> tuple[tuple[str, Any], ...]:
    """Typed ``--opt`` values for policy ``name``, checked against its options."""
    from servecal.sched.policies.options import parse_options

    if not text:
        return ()
    options = options_of(_find(name).options_cls)
    return tuple(sorted(parse_options(options, text, name).items()))


def is_baseline(name: str) -> bool:
    """Whether ``name`` is a built-in static baseline (fixed chunking, no deadlines).

    "Ratio to the best static policy" (docs/spec.md §1) is taken over these, in ``compare``
    and in reports. A user policy (``MODULE:CLASS``) or an unknown name is not."""
    if ":" in name:
        return False
    try:
        entry, _ = _entry_for(name)
    except InputError:
        return False
    return entry.baseline


def listing() -> list[dict[str, Any]]:
    """Every built-in policy, then every router: name (``fixed-N`` for a numbered one),
    backends, options (``name: type = default``), the options its name fixes, and a
    one-line summary (``servecal policies``)."""
    rows = []
    for registry in KINDS:
        for doc in registry.listing():
            row = {k: doc[k] for k in ("backends", "options", "fixed", "summary")}
            rows.append({"name": doc["usage"], **row})
    return rows


def make_policy(name: str, backend: str = ENGINE, **options: Any) -> Any:
    """A fresh policy object, e.g. ``make_policy("fixed-512")`` or
    ``make_policy("sloweave", aging_ms=500.0)`` (options already typed)."""
    return resolve(name, tuple(sorted(options.items()))).build(backend)


@dataclass(frozen=True)
class PolicySpec:
    """A policy as a run names it: ``name`` (``sloweave``, ``fixed-512``,
    ``mypkg.mod:MyPolicy``) and its typed ``--opt`` values. Picklable and hashable:
    a worker process resolves it again by name."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, name: str, opts: Mapping[str, str] | None = None) -> PolicySpec:
        """From the command line: ``name`` and ``--opt`` text values (checked)."""
        name = name.strip()
        spec = cls(name, parse_policy_options(name, opts or {}))
        spec.resolve()
        return spec

    @property
    def label(self) -> str:
        """The name runs, rows and folders are filed under (options appended)."""
        if not self.options:
            return self.name
        return self.name + "[" + ",".join(f"{k}={v}" for k, v in self.options) + "]"

    def resolve(self) -> ResolvedPolicy:
        return resolve(self.name, self.options)

    def build(self, backend: str) -> Any:
        """A fresh policy object for ``backend``."""
        return self.resolve().build(backend)
