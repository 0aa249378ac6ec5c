"""A pod's GPUs, read from its spec in one place: what it asks, and what a bound pod occupies on its node.

Every part of kilter that counts a pod's devices reads them here: the fleet
model and the state store that book bound pods, the extender that places a
pod, the planner that reads pod sets, the gang code that reads members, the
lifecycle controller and the drains that look for running work. Each used
to read the quantity itself and decide alone what an unreadable one
(``nvidia.com/gpu: "abc"``, ``"-4"``, ``"0.5"``) meant: one counted the node
full, one read 0, one raised and left the store half-updated. The rule is
now this module's, and it depends on whose pod it is:

* a pod kilter is asked to place (a filter's pod, a pod set's template)
  with a count that does not read is bad input: ``ask`` raises
  ``InputError`` and the caller answers in its protocol's error field;
* a pod that is already bound holds something kilter cannot count, so it
  is taken to hold its whole node: nothing else is placed beside it, the
  node counts as full, and the pod is named wherever kilter lists what it
  could not read (``count`` returns ``Unreadable``; ``holds_gpus`` is true).

A count is whole devices as the kubelet totals them (``core_v1.pod_request``:
the larger of the app containers' sum and any init container, plus
overhead); quantities are capped at 2^63-1 by ``model.quantity``, so a huge
count reads as a number, never as an overflow.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from kilter.model.core_v1 import PodSpec, pod_request
from kilter.model.errors import InputError

__all__ = ["Unreadable", "ask", "count", "holds_gpus", "one_kind"]

_Count = TypeVar("_Count", int, float)  # whole GPUs (Kubernetes requests) or milli-units (Volcano's Resource)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A device count that does not read as whole devices: the quantity's error and the JSON path of it."""

    message: str
    path: str

    @property
    def why(self) -> str:
        """The error in one line, as ``InputError`` words it (``malformed quantity 'abc' (at $.spec...)``)."""
        return str(self.error())

    def error(self) -> InputError:
        return InputError(self.message, path=self.path)


def count(spec: PodSpec, resource: str, *, path: str = "$.spec") -> int | Unreadable:
    """Whole devices of ``resource`` the spec asks (0 for none), or ``Unreadable`` when a quantity of it does not
    read: a fact about the pod that its caller acts on, never an exception out of a state update."""
    try:
        return pod_request(spec, resource, path=path)
    except InputError as exc:
        return Unreadable(exc.message, exc.path)


def holds_gpus(spec: PodSpec, resources: Iterable[str]) -> bool:
    """A bound pod occupies devices of one of ``resources``: it asks some, or a count of them does not read (then
    it is taken to hold its whole node, so it is running work a drain or a repair must not overlook)."""
    for r in resources:
        n = count(spec, r)
        if isinstance(n, Unreadable) or n > 0:
            return True
    return False


def ask(
    spec: PodSpec, resources: Iterable[str], *, path: str = "$.spec", who: str = "the pod"
) -> tuple[str, int] | None:
    """The one device kind and count a pod kilter is asked to place wants (``one_kind``); None when it asks none.

    InputError when a count does not read: the pod is not running yet, so
    it is the request that is wrong, and the caller says so in its answer.
    """
    counts: list[tuple[str, int]] = []
    for r in resources:
        n = count(spec, r, path=path)
        if isinstance(n, Unreadable):
            raise n.error()
        counts.append((r, n))
    return one_kind(counts, who=who)


def one_kind(asks: Iterable[tuple[str, _Count]], *, who: str = "the pod") -> tuple[str, _Count] | None:
    """The one GPU kind and amount among a pod's (device resource, amount) asks; None when it asks none.

    A pod asking for two GPU kinds cannot be placed on one platform's node,
    so it is refused as bad input rather than judged against either kind.
    """
    asked = sorted((r, n) for r, n in asks if n > 0)
    if len(asked) > 1:
        raise InputError(f"{who} asks for several GPU kinds: {', '.join(r for r, _ in asked)}")
    return asked[0] if asked else None
