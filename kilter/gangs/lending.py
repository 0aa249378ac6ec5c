"""Spares lent to pods of no gang, and taken back by a repair: what the gang book asks of lending.

A scale-up domain may lend its spare GPUs (``topology.spares``): a pod of no
gang whose priority is below every gang's in the domain may take them, and
a repair of a gang there may take them back by preemption (the repair
ladder's ``reclaim`` rung). ``SpareLending`` answers the book's questions on
that one rule: which domains lend to a pod, which GPUs a repair may take
back, which pods it then evicts (``Victim``), and it reserves the slots
taken back once their borrowers are gone, before another plan or a
borrower's next pod takes the GPUs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from kilter.gangs import repairs
from kilter.gangs.arrivals import Arrivals
from kilter.gangs.gang_plan import GangPlan, Slot, Victim
from kilter.model.core_v1 import Pod
from kilter.state.events import Stored
from kilter.state.store import ClusterStore
from kilter.topology import spares
from kilter.topology.fleet import ENDED_PHASES, Fleet

__all__ = ["Reclaimable", "SpareLending", "taking_back"]

Reclaimable = Callable[[Iterable[int]], npt.NDArray[np.int32] | None]


class SpareLending:
    """Lending as one store and its running gangs (``arrivals``) show it; ``plan_of`` finds a gang's open plan."""

    def __init__(self, store: ClusterStore, arrivals: Arrivals, plan_of: Callable[[str], GangPlan | None]) -> None:
        self.store = store
        self.arrivals = arrivals
        self.plan_of = plan_of
        self._reclaiming: set[str] = set()  # gangs whose repair waits for lent spares' borrowers to go
        store.watchers.add("", "Pod", self._pod_left)

    def lent_to(self, fleet: Fleet, pod: Pod) -> npt.NDArray[np.bool_] | None:
        """Per domain, whether its spares are lent to ``pod`` (``spares.lent_to``: the domain lends them, and the
        pod's priority is below every gang's running there, so a repair there may preempt it); None for none."""
        if fleet.spares_lent is None:
            return None
        return spares.lent_to(fleet, pod.spec.priority or 0, self.arrivals.floor(fleet))

    def reclaimable(self, fleet: Fleet, pod: Pod) -> Reclaimable | None:
        """For a repair asked by ``pod``: given domains, the GPUs per node of those that lend their spares which the
        repair may take back — booked to pods of no gang below both ``pod``'s priority and every gang's there (those
        lending let in); None when no domain lends, or the pod may not preempt (``preemptionPolicy: Never``)."""
        lent = fleet.spares_lent
        if lent is None or pod.spec.preemption_policy == "Never":
            return None

        def back(domains: Iterable[int]) -> npt.NDArray[np.int32] | None:
            out = np.zeros(fleet.n_nodes, dtype=np.int32)
            starts = fleet.bitmap.domain_node_start
            for d in domains:
                if lent[d]:
                    for node in range(int(starts[d]), int(starts[d + 1])):
                        out[node] = sum(gpus for _, _, gpus in self._borrowers(fleet, pod, node))
            return out if out.any() else None

        return back

    def victims(self, fleet: Fleet, pod: Pod, slots: Sequence[Slot]) -> tuple[Victim, ...]:
        """The pods a repair takes lent spares back from: for each slot its ``reclaim`` rung left unreserved
        (``taking_back``), the node's borrowers (``_borrowers``, lowest priority first) until the replacement's
        GPUs are free. The recorder evicts them (kube-scheduler's preemption may too)."""
        free: dict[int, int] = {}
        taken: set[str] = set()
        out = []
        for slot in slots:
            if slot.uid or slot.reserved:
                continue
            index = slot.node_index
            have = free.get(index, fleet.bitmap.node_free_gpus(index))
            for _, uid, gpus in self._borrowers(fleet, pod, index):
                held = self.store.pod(uid) if have < slot.gpus and uid not in taken else None
                if held is not None:
                    out.append(Victim(held.metadata.namespace, held.metadata.name, uid, slot.node))
                    taken.add(uid)
                    have += gpus
            free[index] = have - slot.gpus
        return tuple(out)

    def follow(self, plan: GangPlan) -> None:
        """A repair plan was made: if it takes slots back, reserve them as their borrowers go (``reclaim``)."""
        if any(not s.uid and not s.reserved for s in plan.slots):
            self._reclaiming.add(plan.gang.key)

    def reclaim(self, plan: GangPlan) -> None:
        """Reserve each slot a repair takes back by preemption once its node's GPUs are free (the victims evicted),
        before another plan or a borrower's next pod takes them: asked when a pod leaves a node and on every
        later filter of the gang's pods."""
        if plan.gang.key not in self._reclaiming or not plan.feasible:
            return
        waiting = False
        for slot in plan.slots:
            if not slot.uid and not slot.reserved:
                slot.reserved = self.store.reserve(plan.gang.key, [(slot.node, slot.gpus)])
                waiting |= not slot.reserved
        if not waiting:
            self._reclaiming.discard(plan.gang.key)

    def _pod_left(self, old: Stored | None, new: Stored | None) -> None:
        """A bound pod left its node (deleted, ended, or gone from the feed): the repairs waiting for lent spares
        reserve what it freed at once (``reclaim``)."""
        if not self._reclaiming or not isinstance(old, Pod) or not old.spec.node_name:
            return
        if isinstance(new, Pod) and new.spec.node_name == old.spec.node_name and new.status.phase not in ENDED_PHASES:
            return
        for key in list(self._reclaiming):
            plan = self.plan_of(key)
            if plan is None or not plan.feasible:
                self._reclaiming.discard(key)
            else:
                self.reclaim(plan)

    def _borrowers(self, fleet: Fleet, pod: Pod, node: int) -> list[tuple[int, str, int]]:
        """(priority, uid, GPUs) of the pods a repair asked by ``pod`` may take back on node ``node``
        (``Arrivals.borrowers``): of no gang, below both ``pod``'s priority and every gang's in the node's domain —
        the pods lending let in. One rule for the ladder's ``reclaim`` rung and the pods then evicted."""
        below = min(pod.spec.priority or 0, int(self.arrivals.floor(fleet)[int(fleet.node_domain[node])]))
        return self.arrivals.borrowers(fleet.node_names[node], below, self.store)


def taking_back(slots: Sequence[Slot], repaired: Sequence[repairs.Repaired]) -> None:
    """Mark unreserved the open slots a repair takes back by preemption (its ``reclaim`` rung): their GPUs are the
    victims' until the scheduler evicts them, so nothing can be held there yet."""
    places = {r.place for r in repaired if r.step == "reclaim" and r.place is not None}
    back = Counter(r.now for r in repaired if r.step == "reclaim" and r.place is None)
    for slot in slots:
        if slot.uid:
            continue
        if slot.place is not None and slot.place in places:
            slot.reserved = False
        elif slot.place is None and back[slot.node] > 0:
            slot.reserved = False
            back[slot.node] -= 1
