"""The running requests' total KV length, kept exactly without a pass per step.

SLOWeave plans with the decodes' mean context, ``Σ num_computed_tokens`` over vLLM's
running requests (less the few still prefilling). Summing it afresh reads one
attribute of every running request each step: at 256 requests that pass was about a
quarter of the plug-in's time inside vLLM (each request's memory is cold after vLLM's
own scheduling). :class:`RunningKV` keeps the sum instead, from what changes it:

* vLLM's ``schedule()`` adds each scheduled request's tokens to its
  ``num_computed_tokens`` (``_update_after_schedule``) and appends the requests it
  admits to ``running``: the sum grows by the step's scheduled tokens plus what the
  admitted requests had computed before (prefix-cache hits);
* a running request leaves through ``_free_request`` (finished, aborted): its
  tokens are subtracted.

Everything else that could move the sum is not modelled but makes the next query
recount (one pass, as before): a preemption (its tokens reset to 0), a resumable
request stopping, a ``schedule()`` that raised, and a running list whose length
does not match the members kept here (a path that added or removed a request
unseen). Speculative decoding (rejected tokens roll ``num_computed_tokens`` back
inside ``update_from_output``) and KV connectors (failed loads do too) are never
trusted: with them every query recounts.

Plain Python, no vLLM: requests are anything with ``num_computed_tokens`` and
``request_id``, hashed by identity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import islice
from operator import attrgetter
from typing import Any

_computed = attrgetter("num_computed_tokens")


class RunningKV:
    """``Σ num_computed_tokens`` over the running requests, kept between steps.

    ``trusted=False`` (speculative decoding, KV connectors): :meth:`total` recounts
    at every call, exactly the plain pass.
    """

    __slots__ = ("trusted", "valid", "members", "kv", "recounts")

    def __init__(self, trusted: bool = True) -> None:
        self.trusted = trusted
        self.valid = False
        self.members: set[Any] = set()  # the running requests the sum is over
        self.kv = 0
        self.recounts = 0  # how many queries had to recount (tests, logs)

    def total(self, running: Sequence[Any]) -> int:
        """The sum over ``running`` (vLLM's running list, at the start of a step)."""
        if self.valid and len(running) == len(self.members):
            return self.kv
        self.recounts += 1
        self.kv = sum(map(_computed, running))
        if self.trusted:
            self.members = set(running)
            self.valid = True
        return self.kv

    def scheduled(
        self, running: Sequence[Any], n_before: int, tokens: Mapping[str, int], total: int
    ) -> None:
        """vLLM scheduled ``tokens`` (request id → tokens, ``total`` of them) and
        nothing was preempted: it admitted ``running[n_before:]``."""
        if not self.valid:
            return
        grown = total
        members = self.members
        for req in islice(running, n_before, None):  # admitted: their cached prefix too
            members.add(req)
            grown += req.num_computed_tokens - tokens.get(req.request_id, 0)
        self.kv += grown

    def left(self, request: Any) -> None:
        """``request`` is freed (finished or aborted): out of the sum if it ran."""
        if self.valid and request in self.members:
            self.members.discard(request)
            self.kv -= request.num_computed_tokens

    def invalidate(self) -> None:
        """Something not modelled here changed the running requests: recount next."""
        self.valid = False
