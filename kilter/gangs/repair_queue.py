"""Which repairs go first when several gangs lose nodes in one scale-up domain.

When several running gangs repair beside each other, which replacement
reached kilter first must not decide who gets the free nodes there. So
before the gang book plans a repair it plans those of the gangs repairing
beside this one that come before it (``earlier``). A gang repairs beside
this one when its pods wait and some of its pods run (or kilter just bound
them) in a domain this gang's do (``running.placed_domains``); it comes
first by higher pod priority, then by gang key (``repair_order``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from kilter.gangs import pod_facts
from kilter.gangs.arrivals import Arrivals
from kilter.gangs.identity import GangId, identify, in_gang
from kilter.gangs.running import placed_domains
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore

__all__ = ["earlier", "repair_order"]


def repair_order(key: str, waiting: Iterable[Pod]) -> tuple[int, str]:
    """Which of several gangs repairing in one domain goes first (the least): its waiting pods' highest
    priority (``spec.priority``, as the Priority admission plugin sets it; none is 0), then its key."""
    return -max((p.spec.priority or 0 for p in waiting), default=0), key


def earlier(
    store: ClusterStore, arrivals: Arrivals, gang: GangId, members: Sequence[Pod], planned: Callable[[str], bool]
) -> Iterator[tuple[GangId, Pod, int]]:
    """The gangs to plan before ``gang``'s repair (gang, the pod to ask with, its GPUs), one at a time: ``planned``
    is asked again for each, as planning one may plan others."""
    waiting = arrivals.waiting
    if not any(key != gang.key and not planned(key) for key in waiting):
        return  # the usual case: no other gang waits to be planned
    fleet = store.fleet()
    mine = placed_domains(store, fleet, members)
    if not mine:
        return
    me = repair_order(gang.key, waiting.get(gang.key, {}).values())
    for key, pods in sorted(waiting.items()):
        if key == gang.key or planned(key) or not pods or repair_order(key, pods.values()) >= me:
            continue
        first = min(pods.values(), key=lambda p: p.metadata.name)
        other = identify(first, store)
        if other is None:
            continue
        if placed_domains(store, fleet, in_gang(other.key).members(store)) & mine:
            yield other, first, pod_facts.gpu_ask(first, arrivals.resources)[1]
