"""What the gang book learns of pods as the store takes them in: the running gangs' facts, and who waits.

When a node fails, the first replacement pod that reaches the extender
waits while kilter decides where every replacement goes, and that decision
reads every survivor's GPU ask, index, group and plan record time
(``pod_facts``): ~10 µs a pod, 5 ms for a 512-pod gang, against a 1 ms
target for the whole decision. Those facts do not change while a pod runs,
so they are read from the store's watcher as each bound pod of a
kilter-planned gang arrives or changes (a cold start's first list
included), when nothing waits on them. So is each pod's rank, which depends
on the shapes of its gang's pod sets: the book says which shapes it laid a
gang out in (``laid_out``), and a bound pod of that gang arriving later has
its rank read in them, as its gang's next decision (a repair) will read it.
After a restart, a gang's first decision reads its ranks itself. Only pods carrying a plan record
(``kilter.dev/plan``) are read: the gangs kilter placed, which are the
gangs it repairs; a 150,000-pod store of other pods pays a few attribute
reads a pod.

The priority of each bound pod is kept by node: a pod may borrow a domain's
lent spares only below every gang running there (``floor``;
``topology.spares.lent_to``), which the filter of every lone GPU pod asks;
a repair there may take back the GPUs of such pods (``borrowers``).

The unbound pods of gangs are kept by gang key (``waiting``), so that a
repair can find the other gangs repairing beside it and let those that come
first go first (``GangBook``): a handful of gangs wait at any time, and
reading every pod of the store for them on each repair would not do.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kilter.gangs import pod_facts, records
from kilter.gangs.identity import key_of
from kilter.gangs.ranks import Shape
from kilter.model.core_v1 import Pod
from kilter.state.events import Stored
from kilter.state.store import ClusterStore, pod_uid
from kilter.topology.fleet import ENDED_PHASES, Fleet
from kilter.topology.spares import NO_GANG

__all__ = ["MAX_GANGS", "NO_GANG", "Arrivals"]

MAX_GANGS = 1 << 16


class Arrivals:
    """Reads ``store``'s pods now and watches them from then on (a first list included): ``waiting`` holds, per
    gang key, the gang's unbound pods that have not ended, by UID; ``shapes``, per gang key, the pod sets the
    book last laid the gang out in (at most ``MAX_GANGS`` gangs: past that it starts afresh)."""

    def __init__(self, store: ClusterStore) -> None:
        self.resources = tuple(sorted(store.catalog.device_resources))
        self.waiting: dict[str, dict[str, Pod]] = {}
        self.shapes: dict[str, tuple[Shape, ...]] = {}
        self._priorities: dict[str, dict[str, tuple[int, bool]]] = {}  # node -> uid -> (priority, in a gang)
        self._floor: tuple[Fleet, int, npt.NDArray[np.int64]] | None = None  # for (fleet, changes) it was read at
        self._changes = 0
        self._waits_in: dict[str, str] = {}  # uid -> the gang key it waits in
        for pod in store.pods():
            self._changed(None, pod)
        store.watchers.add("", "Pod", self._changed)

    def _changed(self, old: Stored | None, new: Stored | None) -> None:
        was = None
        if isinstance(old, Pod):
            self._stop_waiting(pod_uid(old))
            if old.spec.node_name:
                was = (old.spec.node_name, self._unplace(old.spec.node_name, pod_uid(old)))
        live = isinstance(new, Pod) and new.status.phase not in ENDED_PHASES
        now = None
        if isinstance(new, Pod) and live and new.spec.node_name:
            held = (new.spec.priority or 0, key_of(new) is not None)
            self._priorities.setdefault(new.spec.node_name, {})[pod_uid(new)] = held
            now = (new.spec.node_name, held)
        in_gang = (was is not None and was[1] is not None and was[1][1]) or (now is not None and now[1][1])
        if was != now and in_gang:
            self._changes += 1  # a gang pod came, went, moved or changed priority: the floors are read again
        if not isinstance(new, Pod) or not live:
            return
        if not new.spec.node_name:
            key = key_of(new)
            if key is not None:
                gang, uid = key.format(), pod_uid(new)
                self.waiting.setdefault(gang, {})[uid] = new
                self._waits_in[uid] = gang
            return
        if records.PLAN_ANNOTATION in new.metadata.annotations:
            pod_facts.member(new, self.resources)
            pod_facts.index_of(new)
            pod_facts.record_time(new, records.record_time)
            key = key_of(new)
            shapes = self.shapes.get(key.format()) if key is not None else None
            if shapes is not None:
                pod_facts.held(new, self.resources, shapes)

    def laid_out(self, gang: str, shapes: tuple[Shape, ...]) -> None:
        """The book laid gang ``gang`` out in ``shapes``: read the ranks of its pods that arrive bound from now on
        in them."""
        if gang not in self.shapes and len(self.shapes) >= MAX_GANGS:
            self.shapes.clear()
        self.shapes[gang] = shapes

    def floor(self, fleet: Fleet) -> npt.NDArray[np.int64]:
        """Per domain of ``fleet``, the lowest priority of a gang pod bound there (``NO_GANG`` where none is):
        read again only after a gang pod came, went or moved, or the fleet was rebuilt."""
        held = self._floor
        if held is not None and held[0] is fleet and held[1] == self._changes:
            return held[2]
        out = np.full(len(fleet.domain_ids), NO_GANG, dtype=np.int64)
        at = fleet.node_index
        for node, pods in self._priorities.items():
            index = at.get(node)
            gangs = [p for p, in_gang in pods.values() if in_gang]
            if index is not None and gangs:
                domain = int(fleet.node_domain[index])
                out[domain] = min(int(out[domain]), min(gangs))
        self._floor = (fleet, self._changes, out)
        return out

    def borrowers(self, node: str, below: int, store: ClusterStore) -> list[tuple[int, str, int]]:
        """(priority, uid, GPUs) of each pod of no gang on ``node`` whose priority is below ``below`` and whose GPUs
        the store books: what a repair may take back there by preemption (the caller passes the lower of its own
        priority and the domain's floor, so only pods that lending let in count, never another gang's). Lowest
        priority first, then the most GPUs."""
        out = []
        for uid, (p, in_gang) in self._priorities.get(node, {}).items():
            booking = store.booking(uid) if p < below and not in_gang else None
            if booking is not None and booking.gpus:
                out.append((p, uid, booking.gpus))
        return sorted(out, key=lambda b: (b[0], -b[2], b[1]))

    def _unplace(self, node: str, uid: str) -> tuple[int, bool] | None:
        pods = self._priorities.get(node)
        held = pods.pop(uid, None) if pods is not None else None
        if pods is not None and not pods:
            del self._priorities[node]
        return held

    def _stop_waiting(self, uid: str) -> None:
        gang = self._waits_in.pop(uid, None)
        if gang is None:
            return
        pods = self.waiting.get(gang)
        if pods is not None:
            pods.pop(uid, None)
            if not pods:
                del self.waiting[gang]
