"""Gangs seen one pod at a time: plan them whole, hold later pods to the plan.

kube-scheduler schedules pods one by one. The first pod of a gang that
reaches the extender triggers a plan for every pod of the gang still
unbound (the core planner, as ``kilter plan`` uses it); the plan's GPUs are
reserved in the store (``ClusterStore.reserve``) so nothing else takes them. Later pods of the gang
may only go to planned nodes with a free slot of their shape. A plan ends
when all its slots are bound, or after ``timeout_s``. The store keeps the
reservation across fleet rebuilds; when a rebuild finds a planned node gone,
unusable or full, the reservation is lost, the plan is dropped and the next
pod re-plans. The book never books GPUs in the fleet itself: reservations and
bound pods are the store's. Which gang a pod belongs to is ``identity``'s job.

Plans survive a restart through records in the cluster (``records``): a
plan made here is handed to ``on_planned`` (which ``kilter serve`` connects
to ``recorder.PlanRecorder``), and before making a new plan the book looks for
a record of the gang on its owner object or its pods. A record no older
than ``timeout_s`` is adopted when it still fits (``refit``): pods of the gang
already bound take the slots on their nodes, and every other slot's node must
still exist, be usable, admit the pods and have the GPUs free. Otherwise the
gang is planned afresh (and that plan recorded).

Whom a plan is made for, and how many GPUs one namespace's plans may hold,
is ``trust``'s call (issue #17). The module runs past 500 lines because
planning, verifying, adopting records, holding back and binding slots all
change the one dict of plans and its counters; the rules they apply live in
``trust``, ``refit``, ``records``, ``layout``, ``seats`` and ``waits``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from kilter.gangs import cliques, layout, pod_facts, ranks, records, refit, repairs, trust
from kilter.gangs.arrivals import Arrivals
from kilter.gangs.identity import INDEXED_ANNOTATIONS, INDEXED_LABELS, GangId, gang_of, identify, in_gang
from kilter.gangs.keys import PlanKeys
from kilter.gangs.layout import Layout, SlotSpec
from kilter.gangs.running import placed_domains
from kilter.gangs.waits import SplitWaits
from kilter.model.core_v1 import Pod
from kilter.quota.tree import QuotaTree, build_tree
from kilter.state.events import Stored
from kilter.state.store import ClusterStore
from kilter.topology import pod_gpus, spares, verdicts
from kilter.topology.fleet import ENDED_PHASES, Fleet
from kilter.topology.plan import GangRequest, Plan, gang_request, plan_gang

__all__ = ["INFEASIBLE_RETRY_S", "GangBook", "GangPlan", "PlanHook", "Slot", "Victim", "repair_order"]

log = logging.getLogger("kilter.gangs")

INFEASIBLE_RETRY_S = 5.0  # a gang that did not fit is planned again after this long, not on every pod


@dataclass(slots=True)
class Slot:
    """One planned pod's place: the node (by name, and its index in the fleet as of the plan's ``generation``).

    ``uid`` is the pod bound to the slot ("" while open); ``reserved`` says
    the slot's GPUs are held in the store's reservation for the gang (an open
    slot) rather than booked for its pod. ``rank`` is the rank of pod set
    ``pod_set`` whose pod the slot is for (``gangs.ranks`` holds a pod with
    that index to it; None: the plan is unranked, any pod of the shape may
    take it).
    """

    node: str
    node_index: int
    gpus: int
    uid: str = ""
    reserved: bool = True
    rank: int | None = None
    pod_set: str = ""

    @property
    def place(self) -> ranks.Place | None:
        return None if self.rank is None else ranks.Place(self.pod_set, self.rank)


class Victim(NamedTuple):
    """A pod a repair takes a lent spare back from, on the node it takes back."""

    namespace: str
    name: str
    uid: str
    node: str


@dataclass
class GangPlan:
    gang: GangId
    plan: Plan
    slots: list[Slot]
    created: float
    generation: int
    origin: str = "planned"  # "planned" here, "repair" (beside a running gang's pods), "record", "admission-check"
    pods: tuple[str, ...] = ()  # the gang's pods unbound when it was planned: where a record goes without an owner
    verified: bool = True  # a pod of the gang that the state holds asked for it (``trust``); else not recorded yet
    asker: tuple[str, str, str] = ("", "", "")  # namespace, name and uid of the unseen pod an unverified plan is for
    admitted: bool = False  # a queue admitted the gang: exempt from the namespace's caps
    uids: dict[str, str] = field(default_factory=dict)  # UID of each object the record goes on, by name (signing)
    shapes: tuple[ranks.Shape, ...] = ()  # the gang's pod sets, whole: what a pod's index is a rank of
    waiting: bool = False  # held back for room in fewer domains (``waits``): infeasible, holding no nodes
    retry_s: float = INFEASIBLE_RETRY_S  # an infeasible plan is asked again after this long
    free_at: int = 0  # the fleet's free GPUs when an infeasible plan was made: asked again as soon as more are free
    repaired: tuple[repairs.Repaired, ...] = ()  # a repair plan's replacements: which rank went where, and why
    victims: tuple[Victim, ...] = ()  # pods a repair takes lent spares back from

    @property
    def open_gpus(self) -> int:
        """GPUs the plan holds for pods still to come (its slots no pod is bound to)."""
        return sum(s.gpus for s in self.slots if not s.uid)

    @property
    def feasible(self) -> bool:
        return self.plan.feasible

    def nodes_for(self, uid: str, gpus: int) -> list[int]:
        """Planned nodes this pod may use: its own slot if it has one, else every free slot of its shape."""
        own = [s.node_index for s in self.slots if s.uid == uid]
        if own:
            return own
        return sorted({s.node_index for s in self.slots if not s.uid and s.gpus == gpus})

    def hold(self, uid: str, gpus: int) -> verdicts.Hold:
        """What the verdict ladder needs of this plan for one pod: its planned nodes, or why the gang waits."""
        if not self.feasible:
            return verdicts.Hold(False, (), self.plan.reason, waits=self.waiting)
        return verdicts.Hold(True, self.nodes_for(uid, gpus), self.describe())

    def describe(self) -> str:
        taken = sum(1 for s in self.slots if s.uid)
        return f"gang {self.gang.key}: {self.plan.reason}; {taken}/{len(self.slots)} planned pods bound"


def repair_order(key: str, waiting: Iterable[Pod]) -> tuple[int, str]:
    """Which of several gangs repairing in one domain goes first (the least): its waiting pods' highest
    priority (``spec.priority``, as the Priority admission plugin sets it; none is 0), then its key."""
    return -max((p.spec.priority or 0 for p in waiting), default=0), key


PlanHook = Callable[[GangId, GangPlan], object]  # told of each feasible plan made here, and again when verified


class GangBook:
    """Open plans, keyed by gang; every method runs on the server's one event-loop thread.

    ``clock`` times plans (monotonic seconds); ``wall`` is Unix time, to judge
    the age of records made by another process.
    """

    def __init__(
        self,
        store: ClusterStore,
        *,
        timeout_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_planned: PlanHook | None = None,
        limits: trust.Limits | None = None,
        keys: PlanKeys | None = None,
        waits: SplitWaits | None = None,
    ):
        self.store = store
        store.index_pods(INDEXED_LABELS, INDEXED_ANNOTATIONS)
        self.arrivals = Arrivals(store)  # the running gangs' pod facts, learned as pods arrive; who waits
        self._reclaiming: set[str] = set()  # gangs whose repair waits for lent spares' borrowers to go
        store.watchers.add("", "Pod", self._pod_left)
        self.timeout_s = timeout_s
        self.clock = clock
        self.wall = wall
        self.on_planned = on_planned
        self.plans: dict[str, GangPlan] = {}
        self.planned = 0
        self.replanned = 0
        self.adopted = 0  # plans taken from records in the cluster
        self.limits = limits or trust.Limits()
        self._tree: tuple[int, QuotaTree] | None = None
        self.keys = keys or PlanKeys.ephemeral()  # verify records read here; the recorder signs with the same
        self.refused = 0  # plans not made: a stranger asked, or a cap was reached
        self.unplaceable = 0  # plans made that do not fit now (the gang waits; counted once per retry)
        self.repairs: Counter[str] = Counter()  # ranks replaced in running gangs, by the repair ladder's rung
        self.unverified_dropped = 0  # plans for pods that never showed up in the state
        self.waits = waits  # whether a preferred gang holds off for fewer domains; None: it never does
        self.cliques = cliques.Cliques()  # ComputeDomains: one clique each, never two in one

    def plan_for(self, gang: GangId, pod: Pod, gpus: int) -> GangPlan | None:
        """The gang's current plan, making one if there is none or the old one no longer holds.

        Who asks decides what it gets (``trust``): a stranger gets no plan
        (None: placed like any pod, holding nothing), an unseen pod an
        unverified plan, or — if a member verified the gang's plan already —
        that plan only while it has open slots beyond the gang's unplaced pods
        in the state, else a plan that makes it wait for the feed. A plan over
        a cap is not made: the answer is an infeasible plan saying which cap,
        kept nowhere.
        """
        self.expire()
        who = trust.asker(self.store, gang, pod)
        if who.kind == "stranger":
            self.refused += 1
            log.info("gang %s: no plan: %s", gang.key, who.why, extra={"gang": gang.key})
            return None
        pod = who.pod
        current = self.plans.get(gang.key)
        if (
            current is not None
            and self._still_valid(current)
            and (current.feasible or (self.clock() - current.created < current.retry_s and not self._freed(current)))
        ):
            if who.kind == "member":
                self._verify(current)
            elif current.verified and not self._room_for_unseen(current):
                return self._waiting(current, pod)
            if gang.key in self._reclaiming and current.feasible:
                self._hold_taken_back(current)
            return current
        if current is not None:
            self._drop(current)
            self.replanned += 1
        admitted = trust.is_admitted(self.store, gang)
        beyond = "" if admitted else self._beyond_queue(gang, pod, gpus)
        if beyond:
            return self._refusal(gang, beyond)
        plans, verified = self.plans.values(), who.kind == "member"
        full = trust.full(plans, self.limits, gang, gpus, verified=verified, admitted=admitted, fleet=self._fleet_gpus)
        if full:
            return self._refusal(gang, full)
        made = self._make(gang, pod, gpus)
        if made is None:
            return None
        made.verified, made.admitted = who.kind == "member", admitted
        made.free_at = self._free_gpus()
        if not made.verified:
            made.asker = (pod.metadata.namespace, pod.metadata.name, pod.metadata.uid)
        over = "" if admitted or not made.feasible else trust.over_cap(plans, self.limits, made, self._fleet_gpus())
        if over:
            self._drop(made)
            return self._refusal(gang, over)
        self.plans[gang.key] = made
        self.planned += 1
        if not made.feasible:
            self.unplaceable += 1
        if made.origin == "repair":
            self.repairs.update(r.step for r in made.repaired)
        if made.origin == "record":
            self.adopted += 1
        elif made.feasible:
            self._tell(made)  # told of unverified plans too; ``PlanRecorder`` writes only verified ones
        return made

    # ------------------------------------------------------------------ trust and caps

    def _verify(self, plan: GangPlan) -> None:
        """A member of the gang asked: the plan is the gang's own now, and ``on_planned`` is told again (it records
        verified plans only)."""
        if plan.verified:
            return
        plan.verified, plan.asker = True, ("", "", "")
        members = in_gang(plan.gang.key).members(self.store)
        plan.pods = tuple(sorted(p.metadata.name for p in members if not p.spec.node_name))
        if plan.feasible and plan.origin in ("planned", "repair"):
            self._tell(plan)

    def _room_for_unseen(self, plan: GangPlan) -> bool:
        """The plan has more open slots than the gang has unplaced pods in the state: a pod the feed has not shown
        yet may take one (only such a pod can be the gang's; with an API server, a made-up one cannot be bound)."""
        open_slots = sum(1 for s in plan.slots if not s.uid)
        placed = {s.uid for s in plan.slots if s.uid}
        members = in_gang(plan.gang.key).members(self.store)
        waiting = sum(1 for p in members if not p.spec.node_name and (p.metadata.uid or "") not in placed)
        return open_slots > waiting

    def _waiting(self, plan: GangPlan, pod: Pod) -> GangPlan:
        """The answer to an unseen pod on a plan a member verified: no slot until the state shows the pod."""
        where = f"{pod.metadata.namespace}/{pod.metadata.name}"
        wait = Plan(False, f"waits until kilter's state shows pod {where}", plan.gang.key)
        return GangPlan(plan.gang, wait, [], self.clock(), self.store.generation, verified=False)

    def _refusal(self, gang: GangId, why: str) -> GangPlan:
        self.refused += 1
        log.info("gang %s: not planned: %s", gang.key, why, extra={"gang": gang.key})
        return GangPlan(gang, Plan(False, why, gang.key), [], self.clock(), self.store.generation, verified=False)

    def _beyond_queue(self, gang: GangId, pod: Pod, gpus: int) -> str:
        """Why the gang asks more GPUs than the queue the pod names could ever admit ("" if it does not, or no queue
        is known): a gang of 23 pods in a queue of 8 GPUs would otherwise hold 92 for nothing."""
        fleet = self.store.fleet()
        asked = [r for r in sorted(fleet.catalog.device_resources) if _asks(pod, r)]
        if not asked:
            return ""
        limit = trust.queue_limit(self.store, pod, asked[0], self._quota_tree)
        want = sum(ps.count for ps in gang.pod_sets) * gpus if gang.pod_sets else (gang.size or 1) * gpus
        if limit is None or want <= limit[1]:
            return ""
        return f"gang {gang.key} asks {want} {asked[0]}; {limit[0]} could admit at most {limit[1]}"

    def _quota_tree(self) -> QuotaTree:
        """The Kueue quota tree of the current state, built once per state version."""
        if self._tree is None or self._tree[0] != self.store.version:
            state = self.store.state()
            self._tree = (self.store.version, build_tree(state.cluster_queues, state.cohorts))
        return self._tree[1]

    def _free_gpus(self) -> int:
        return int(self.store.fleet().bitmap.domain_free_gpus.sum())

    def _freed(self, plan: GangPlan) -> bool:
        """GPUs came free since an infeasible plan was made: it may fit now, so the cached answer is stale."""
        return self._free_gpus() > plan.free_at

    def _fleet_gpus(self) -> int:
        fleet = self.store.fleet()
        return int(fleet.bitmap.node_gpu_counts.sum()) if fleet.n_nodes else 0

    def adopt(self, gang: GangId, plan: Plan) -> GangPlan | None:
        """Take a plan made elsewhere (the AdmissionCheck's) as the gang's, reserving its GPUs now.

        The gang's pods then find it when they reach the extender, so they land
        where the check said. Refused (None) if the gang already has a plan, or
        the plan no longer fits the fleet as it is.
        """
        if gang.key in self.plans or not plan.feasible:
            return None
        fleet = self.store.fleet()
        if any(n >= fleet.n_nodes for n in plan.node_indices):
            return None
        shaped = layout.of_plan(plan)
        slots = _slots(shaped.slots(plan, fleet))
        if not self._reserve(gang, slots):
            return None
        now, generation, shapes = self.clock(), self.store.generation, shaped.shapes
        adopted = GangPlan(gang, plan, slots, now, generation, "admission-check", admitted=True, shapes=shapes)
        self.plans[gang.key] = adopted
        self.planned += 1
        self._tell(adopted)
        return adopted

    def _tell(self, plan: GangPlan) -> None:
        """Hand ``plan`` to ``on_planned``, with the UIDs of the objects its record goes on (the signature binds
        the record to its object)."""
        if self.on_planned is None:
            return
        owner = records.owner_of(plan.gang.key)
        if owner is not None:
            meta = (self.store.get(*owner) or {}).get("metadata")
            uid = meta.get("uid") if isinstance(meta, Mapping) else None
            plan.uids = {owner[3]: uid} if isinstance(uid, str) and uid else {}
        else:
            ns = trust.namespace_of(plan.gang.key)
            held = (self.store.pod_named(ns, name) for name in plan.pods)
            plan.uids = {p.metadata.name: p.metadata.uid for p in held if p is not None and p.metadata.uid}
        self.on_planned(plan.gang, plan)

    def _make(self, gang: GangId, pod: Pod, gpus: int) -> GangPlan | None:
        fleet = self.store.fleet()
        members: list[Pod] | None = list(gang.members) if gang.members is not None else None
        if gang.placed is not None and gang.size is not None:
            bound, size = gang.placed, gang.size  # the caller knows: no need to look through every pod
        else:
            members = gang_of(pod).members(self.store)
            bound = gang.placed if gang.placed is not None else sum(1 for p in members if p.spec.node_name)
            size = gang.size if gang.size is not None else max(len(members), 1)
        if gang.size is None and size < 2:
            return None  # a lone pod of a gang whose size nothing tells: placed like any pod
        if size - bound <= 0:
            return None
        shaped = layout.of_gang(gang, pod, gpus, members, size=size, bound=bound, catalog=fleet.catalog)
        self.arrivals.laid_out(gang.key, shaped.shapes)
        request = gang_request(gang.key, shaped.to_place, fleet.catalog)
        request = self.cliques.constrain(self.store, request, pod=pod, gang=gang.key)
        lent = self.lending(fleet, pod) if not bound else None
        if lent is not None:
            request = replace(request, spares_lent=lent)
        if bound and members is None:
            members = in_gang(gang.key).members(self.store)
        record = self._record(gang, members)
        adopted = self._from_record(gang, request, members, shaped, record)
        if adopted is not None:
            return adopted
        if bound:
            self._repair_earlier(gang, members or ())
        fixed = (
            repairs.plan_repair(fleet, request, shaped, members or (), record, pod, self._reclaimable(fleet, pod))
            if bound
            else None
        )
        result = fixed.plan if fixed is not None else plan_gang(fleet, request)
        wait = self.waits.for_gang(gang, pod, request, result) if self.waits is not None and not bound else None
        if wait is not None and wait.wait:  # nothing reserved, nothing recorded; asked again within INFEASIBLE_RETRY_S
            waits = Plan(False, wait.reason, gang.key, result.platform)
            retry = min(INFEASIBLE_RETRY_S, wait.remaining_s)
            return GangPlan(gang, waits, [], self.clock(), self.store.generation, waiting=True, retry_s=retry)
        slots: list[Slot] = []
        if result.feasible:
            slots = _slots(shaped.slots(result, fleet))
            if fixed is not None:
                _taking_back(slots, fixed.repaired)
            if not self._reserve(gang, slots):  # the planner only uses free GPUs of usable nodes: a bug
                log.error(
                    "gang %s: the plan's GPUs could not be reserved; placed like single pods",
                    gang.key,
                    extra={"gang": gang.key},
                )
                return None
        unbound = {p.metadata.name for p in members or () if not p.spec.node_name}
        held = self.store.pod_named(pod.metadata.namespace, pod.metadata.name)
        if held is not None and held.metadata.uid == pod.metadata.uid and not held.spec.node_name:
            unbound.add(pod.metadata.name)  # only pods the state holds get a record (``trust``)
        now, generation, pods = self.clock(), self.store.generation, tuple(sorted(unbound))
        if fixed is not None:
            origin, repaired = "repair", fixed.repaired
            victims = self._victims(fleet, pod, slots)
            if any(not s.uid and not s.reserved for s in slots):
                self._reclaiming.add(gang.key)
            return GangPlan(
                gang,
                result,
                slots,
                now,
                generation,
                origin,
                pods,
                shapes=shaped.shapes,
                repaired=repaired,
                victims=victims,
            )
        return GangPlan(gang, result, slots, now, generation, pods=pods, shapes=shaped.shapes)

    def lending(self, fleet: Fleet, pod: Pod) -> npt.NDArray[np.bool_] | None:
        """Per domain, whether its spares are lent to ``pod`` (``spares.lent_to``: the domain lends them, and the
        pod's priority is below every gang's running there, so a repair there may preempt it); None for none."""
        if fleet.spares_lent is None:
            return None
        return spares.lent_to(fleet, pod.spec.priority or 0, self.arrivals.floor(fleet))

    def _hold_taken_back(self, plan: GangPlan) -> None:
        """Reserve each slot a repair takes back by preemption once its node's GPUs are free (the victims evicted),
        before another plan or a borrower's next pod takes them: asked when a pod leaves a node and on every
        later filter of the gang's pods."""
        waiting = False
        for slot in plan.slots:
            if not slot.uid and not slot.reserved:
                slot.reserved = self.store.reserve(plan.gang.key, [(slot.node, slot.gpus)])
                waiting |= not slot.reserved
        if not waiting:
            self._reclaiming.discard(plan.gang.key)

    def _pod_left(self, old: Stored | None, new: Stored | None) -> None:
        """A bound pod left its node (deleted, ended, or gone from the feed): the repairs waiting for lent spares
        reserve what it freed at once (``_hold_taken_back``)."""
        if not self._reclaiming or not isinstance(old, Pod) or not old.spec.node_name:
            return
        if isinstance(new, Pod) and new.spec.node_name == old.spec.node_name and new.status.phase not in ENDED_PHASES:
            return
        for key in list(self._reclaiming):
            plan = self.plans.get(key)
            if plan is None or not plan.feasible:
                self._reclaiming.discard(key)
            else:
                self._hold_taken_back(plan)

    def _borrowers(self, fleet: Fleet, pod: Pod, node: int) -> list[tuple[int, str, int]]:
        """(priority, uid, GPUs) of the pods a repair asked by ``pod`` may take back on node ``node``
        (``Arrivals.borrowers``): of no gang, below both ``pod``'s priority and every gang's in the node's domain —
        the pods lending let in. One rule for the ladder's ``reclaim`` rung and the pods then evicted."""
        below = min(pod.spec.priority or 0, int(self.arrivals.floor(fleet)[int(fleet.node_domain[node])]))
        return self.arrivals.borrowers(fleet.node_names[node], below, self.store)

    def _victims(self, fleet: Fleet, pod: Pod, slots: Sequence[Slot]) -> tuple[Victim, ...]:
        """The pods a repair takes lent spares back from: for each slot its ``reclaim`` rung left unreserved
        (``_taking_back``), the node's borrowers (``_borrowers``, lowest priority first) until the replacement's
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

    def _reclaimable(self, fleet: Fleet, pod: Pod) -> Callable[[Iterable[int]], npt.NDArray[np.int32] | None] | None:
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

    def _repair_earlier(self, gang: GangId, members: Sequence[Pod]) -> None:
        """Plan first the repairs of the gangs repairing beside this one that come before it (``repair_order``),
        so that when several gangs lose nodes in one domain, which replacement reached kilter first does not
        decide who gets the free nodes there. A gang repairs beside this one when its pods wait and some of its
        pods run (or kilter just bound them) in a domain this gang's do (``running.placed_domains``); it comes
        first by higher pod priority, then by gang key."""
        waiting = self.arrivals.waiting
        if not any(key != gang.key and key not in self.plans for key in waiting):
            return  # the usual case: no other gang waits to be planned
        fleet = self.store.fleet()
        mine = placed_domains(self.store, fleet, members)
        if not mine:
            return
        me = repair_order(gang.key, waiting.get(gang.key, {}).values())
        for key, pods in sorted(waiting.items()):
            if key == gang.key or key in self.plans or not pods or repair_order(key, pods.values()) >= me:
                continue
            first = min(pods.values(), key=lambda p: p.metadata.name)
            other = identify(first, self.store)
            if other is None:
                continue
            if placed_domains(self.store, fleet, in_gang(other.key).members(self.store)) & mine:
                self.plan_for(other, first, pod_facts.gpu_ask(first, self.arrivals.resources)[1])

    # ------------------------------------------------------------------ records

    def _record(self, gang: GangId, members: list[Pod] | None) -> records.PlanRecord | None:
        """The gang's newest plan record that verifies, of any age (a repair reads the ranks' nodes from it)."""
        owner = records.owner_of(gang.key)
        if owner is not None:
            where = f"{owner[1]} {owner[2]}/{owner[3]}"
            record = records.read_object(self.store.get(*owner), where=where, keys=self.keys)
        else:
            where = f"the pods of gang {gang.key}"
            record = records.newest(members or (), keys=self.keys, owner_uid=self._owner_uid)
        if record is not None and record.gang != gang.key:
            log.info("%s: the plan record names gang %s, not %s; ignored", where, record.gang, gang.key)
            return None
        return record

    def _from_record(
        self,
        gang: GangId,
        request: GangRequest,
        members: list[Pod] | None,
        shaped: Layout,
        record: records.PlanRecord | None,
    ) -> GangPlan | None:
        """The gang's recorded plan, taken up again if it is young enough and still holds; None otherwise."""
        if record is None:
            return None
        age = self.wall() - record.at_s
        if abs(age) > self.timeout_s:
            log.info("gang %s: the plan recorded at %s is past the gang timeout; planning afresh", gang.key, record.at)
            return None
        if members is None:
            members = in_gang(gang.key).members(self.store)
        adopted, why = self._adopt_record(gang, request, record, members, shaped)
        if adopted is None:
            log.info("gang %s: the plan recorded at %s no longer fits (%s); planning afresh", gang.key, record.at, why)
        else:
            log.info("gang %s: took up the plan recorded at %s", gang.key, record.at, extra={"gang": gang.key})
        return adopted

    def _owner_uid(self, gang_key: str) -> str:
        """The UID of the Workload or PodGroup a record's gang key names ("" if the state holds none): what a
        podSetUpdates record on a pod is signed for."""
        owner = records.owner_of(gang_key)
        meta = (self.store.get(*owner) or {}).get("metadata") if owner is not None else None
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        return uid if isinstance(uid, str) else ""

    def _adopt_record(
        self, gang: GangId, request: GangRequest, record: records.PlanRecord, members: Sequence[Pod], shaped: Layout
    ) -> tuple[GangPlan | None, str]:
        """The recorded plan with its open slots reserved (each keeps the rank its place in the record gives it:
        ``refit``), or None and why it does not fit the fleet now."""
        fit = refit.fit(record, request, members, self.store.fleet(), shaped=shaped)
        if isinstance(fit, str):
            return None, fit
        slots = _slots(fit.open)
        if not self._reserve(gang, slots):
            return None, "its nodes' GPUs could not be reserved"
        now, generation, shapes = self.clock(), self.store.generation, shaped.shapes
        moved = repairs.recorded(record, shaped, self.store.fleet())  # a recorded repair says what it replaced
        taken = [*_slots(fit.taken), *slots]
        return GangPlan(gang, fit.plan, taken, now, generation, "record", shapes=shapes, repaired=moved), ""

    def _still_valid(self, plan: GangPlan) -> bool:
        """After a fleet rebuild, find each slot's node again by name; invalid if one went away, or if the rebuild
        lost the plan's reservation (a node of it turned unusable or filled up)."""
        fleet = self.store.fleet()
        if plan.generation == self.store.generation:
            return True
        plan.generation = self.store.generation
        ok = not self.store.reservation_lost(plan.gang.key)
        for slot in plan.slots:
            index = fleet.node_index.get(slot.node)
            if index is None:
                ok = False
                continue
            slot.node_index = index
        return ok

    def bound(
        self, uid: str, node_name: str, gpus: int, *, gang: str | None = None, place: ranks.Place | None = None
    ) -> GangPlan | None:
        """A pod was bound: turn its slot's reservation into the pod's own booking.

        ``gang`` is the key of the pod's gang when the caller knows it: only
        that gang's plan gives the pod a slot, so a pod of another gang (or of
        none) bound onto a planned node never takes a slot that is not its own.
        ``place`` is the pod's rank (``ranks.place_of``): its slot there comes first, even from a pod that is gone.
        """
        plans = self.plans.values() if gang is None else [p for p in (self.plans.get(gang),) if p is not None]
        for plan in plans:
            slot = next((s for s in plan.slots if s.uid == uid), None)
            if slot is None and place is not None:
                mine = (s for s in plan.slots if s.place == place and s.node == node_name and s.gpus == gpus)
                slot = next((s for s in mine if not s.uid or ranks.is_gone(self.store, s.uid)), None)
            if slot is None:
                slot = next((s for s in plan.slots if not s.uid and s.node == node_name and s.gpus == gpus), None)
            if slot is None:
                continue
            slot.uid = uid
            self._release(plan, slot)
            self.store.assume(uid, node_name, gpus)
            if all(s.uid for s in plan.slots):
                self._drop(plan)  # every slot bound: nothing left reserved, and no lost mark kept
            return plan
        return None

    def unbound(self, uid: str) -> bool:
        """A placement was taken back (Volcano discarded an allocation): the slot is free and reserved again."""
        for plan in self.plans.values():
            slot = next((s for s in plan.slots if s.uid == uid), None)
            if slot is None:
                continue
            self.store.forget(uid)
            slot.uid = ""
            slot.reserved = self.store.reserve(plan.gang.key, [(slot.node, slot.gpus)])
            return True
        return False

    def expire(self) -> None:
        """Drop plans past the gang timeout, and unverified ones whose pod has not reached the state in the grace."""
        now = self.clock()
        for key in [k for k, p in self.plans.items() if now - p.created > self.timeout_s]:
            self._drop(self.plans[key])
        for plan in [p for p in self.plans.values() if not p.verified]:
            ns, name, uid = plan.asker
            held = self.store.pod_named(ns, name) if name else None
            arrived = held is not None and (not uid or held.metadata.uid == uid)
            if arrived and held is not None and trust.asker(self.store, plan.gang, held).kind == "member":
                self._verify(plan)
            elif now - plan.created > self.limits.grace_s:
                self.unverified_dropped += 1
                log.info("gang %s: pod %s/%s never reached kilter's state; plan dropped", plan.gang.key, ns, name)
                self._drop(plan)

    def _drop(self, plan: GangPlan) -> None:
        self.store.unreserve(plan.gang.key)
        for slot in plan.slots:
            slot.reserved = False
        self.plans.pop(plan.gang.key, None)

    def _reserve(self, gang: GangId, slots: Sequence[Slot]) -> bool:
        """Hold the open slots' GPUs in the store, all or none (not those a repair takes back by preemption: pods
        hold them until the scheduler evicts them)."""
        return self.store.reserve(gang.key, [(s.node, s.gpus) for s in slots if not s.uid and s.reserved])

    def _release(self, plan: GangPlan, slot: Slot) -> None:
        """Give a slot's GPUs back (a no-op when a rebuild already dropped the gang's reservation)."""
        if slot.reserved:
            self.store.release_slot(plan.gang.key, slot.node, slot.gpus)
        slot.reserved = False


def _asks(pod: Pod, resource: str) -> bool:
    gpus = pod_gpus.count(pod.spec, resource)
    return not isinstance(gpus, pod_gpus.Unreadable) and gpus > 0  # one that does not read: the filter refuses it


def _taking_back(slots: Sequence[Slot], repaired: Sequence[repairs.Repaired]) -> None:
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


def _slots(specs: Iterable[SlotSpec]) -> list[Slot]:
    """Slots from (node, node index, GPUs, uid, rank): open ones reserved, those a pod holds not."""
    return [Slot(n, i, g, u, not u, p.rank, p.pod_set) if p else Slot(n, i, g, u, not u) for n, i, g, u, p in specs]
