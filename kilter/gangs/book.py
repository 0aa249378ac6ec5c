"""Gangs seen one pod at a time: plan them whole, hold later pods to the plan.

kube-scheduler schedules pods one by one. The first pod of a gang that
reaches the extender triggers a plan for every pod of the gang still
unbound (the core planner, as ``kilter plan`` uses it); the plan's GPUs are
reserved in the store (``ClusterStore.reserve``) so nothing else takes them. Later pods of the gang
may only go to planned nodes with a free slot of their shape. A plan ends
when all its slots are bound, or after the gang timeout. The store keeps the
reservation across fleet rebuilds; when a rebuild finds a planned node gone,
unusable or full, the reservation is lost, the plan is dropped and the next
pod re-plans. The book never books GPUs in the fleet itself: reservations and
bound pods are the store's. Which gang a pod belongs to is ``identity``'s job.

The book keeps the open plans (``gang_plan.GangPlan``, whose ``Life`` says
where each stands) and their reservations; the rest it asks of
collaborators, each with its own module: whom a plan is made for and how
much one namespace's plans may hold (``trust``, applied by ``caps.Caps``),
plan records found and taken up again after a restart
(``record_reader.RecordReader``), repairs beside a running gang's pods
(``repairs``, in ``repair_queue`` order), spares lent and taken back
(``lending.SpareLending``), and whether a gang holds off for fewer domains
(``waits.SplitWaits``). A plan made here is handed to ``on_planned`` (which
``kilter serve`` connects to ``recorder.PlanRecorder``). Its settings arrive
through ``configure`` alone. Callers read plans through ``plan_of``,
``is_planned``, ``open_count`` and ``gang_keys``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from kilter.gangs import cliques, layout, ranks, repair_queue, repairs, trust
from kilter.gangs.arrivals import Arrivals
from kilter.gangs.caps import Caps
from kilter.gangs.expected_starts import RECENT_MAX_AGE_S
from kilter.gangs.gang_plan import INFEASIBLE_RETRY_S, GangPlan, Life, Origin, PodRef, Slot, Victim, slots_of
from kilter.gangs.identity import INDEXED_ANNOTATIONS, INDEXED_LABELS, GangId, gang_of, in_gang
from kilter.gangs.kept import Kept
from kilter.gangs.keys import PlanKeys
from kilter.gangs.lending import SpareLending, taking_back
from kilter.gangs.record_reader import RecordReader
from kilter.gangs.store_starts import StartsOfStore
from kilter.gangs.waits import SplitWaits
from kilter.model.core_v1 import Pod
from kilter.quota.runtimes import WINDOW
from kilter.state.store import ClusterStore
from kilter.topology.backfill import Outcome
from kilter.topology.fleet import Fleet
from kilter.topology.plan import GangRequest, Plan, gang_request, plan_gang
from kilter.topology.split_wait import SplitWait

IntT = TypeVar("IntT", np.int8, np.int32)

__all__ = ["BookSettings", "GangBook", "GangPlan", "PlanHook", "Slot", "Victim"]

log = logging.getLogger("kilter.gangs")

PlanHook = Callable[[GangId, GangPlan], object]  # told of each feasible plan made here, and again when verified


@dataclass(frozen=True)
class BookSettings:
    """What ``kilter serve --config`` may change while the book runs (``GangBook.configure``)."""

    timeout_s: float = 300.0
    """A plan is dropped if its pods do not all bind within this; a record older than this is not taken up."""
    limits: trust.Limits = field(default_factory=trust.Limits)
    """Bounds on whom plans are made for and what they hold (``trust``)."""
    split_wait: SplitWait | None = None
    """The split-wait rule where nothing in the cluster sets one; None: as the book's ``SplitWaits`` was built."""
    reservations: bool = False
    """Keep reservations: plans are steered around them (``kept``, ``topology.backfill``)."""


class GangBook:
    """Open plans, keyed by gang; every method runs on the server's one event-loop thread.

    ``clock`` times plans (monotonic seconds); ``wall`` is Unix time, to judge
    the age of records made by another process.
    """

    def __init__(
        self,
        store: ClusterStore,
        *,
        settings: BookSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_planned: PlanHook | None = None,
        keys: PlanKeys | None = None,
        waits: SplitWaits | None = None,
    ):
        self.store = store
        store.index_pods(INDEXED_LABELS, INDEXED_ANNOTATIONS)
        self.arrivals = Arrivals(store)  # the running gangs' pod facts, learned as pods arrive; who waits
        self._plans: dict[str, GangPlan] = {}
        self.spares = SpareLending(store, self.arrivals, self.plan_of)
        self.clock = clock
        self.on_planned = on_planned
        self.settings = BookSettings()
        self.caps = Caps(store, self.settings.limits)
        # verify records read here; the recorder signs with the same keys
        self.records = RecordReader(store, keys or PlanKeys.ephemeral(), wall, self.settings.timeout_s)
        self.waits = waits  # whether a preferred gang holds off for fewer domains; None: it never does
        self.cliques = cliques.Cliques()  # ComputeDomains: one clique each, never two in one
        self.planned = 0
        self.replanned = 0
        self.adopted = 0  # plans taken from records in the cluster
        self.refused = 0  # plans not made: a stranger asked, or a cap was reached
        self.unplaceable = 0  # plans made that do not fit now (the gang waits; counted once per retry)
        self.repairs: Counter[str] = Counter()  # ranks replaced in running gangs, by the repair ladder's rung
        self.unverified_dropped = 0  # plans for pods that never showed up in the state
        self.steered = 0  # plans made again away from a kept reservation
        self.turned_away = 0  # plans refused because every one would delay a kept reservation
        # The server's one expected-starts answer (views, Plan, metrics, and the reservations the doors keep).
        self.starts = StartsOfStore(
            store,
            waits.clock if waits is not None else wall,
            window=waits.runtimes.window if waits is not None else WINDOW,
            settings=waits.settings if waits is not None else None,
            keep=lambda: self.settings.reservations,
            max_age_s=RECENT_MAX_AGE_S,
        )
        self.configure(settings or BookSettings())

    def configure(self, settings: BookSettings) -> None:
        """Take ``settings`` (at the start, and when ``kilter serve --config`` is reloaded): open plans keep their
        slots; the new timeout and limits apply from the next question on."""
        self.settings = settings
        self.caps.limits = settings.limits
        self.records.timeout_s = settings.timeout_s
        if self.waits is not None and settings.split_wait is not None:
            self.waits.set_defaults(settings.split_wait)

    def kept(self) -> Kept | None:
        """The reservations the doors keep now: from the server's last expected-starts answer, over the fleet as it
        is (None with ``reservations`` off, before the first answer, or while the fleet was rebuilt since)."""
        if not self.settings.reservations:
            return None
        kept = self.starts.kept()
        return kept if kept is not None and kept.fleet is self.store.fleet() else None

    @property
    def keys(self) -> PlanKeys:
        """The keys plan records are verified with (the recorder signs with the same)."""
        return self.records.keys

    # ------------------------------------------------------------------ what callers may ask of the open plans

    def plan_of(self, gang_key: str) -> GangPlan | None:
        """The gang's open plan, if the book holds one (never makes one: ``plan_for`` does)."""
        return self._plans.get(gang_key)

    def is_planned(self, gang_key: str) -> bool:
        return gang_key in self._plans

    def open_count(self) -> int:
        """Plans the book holds, feasible or not (``kilter_gang_plans_open``)."""
        return len(self._plans)

    def gang_keys(self) -> list[str]:
        """The keys of the gangs with an open plan, in the order they were planned."""
        return list(self._plans)

    # ------------------------------------------------------------------ planning

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
        current = self._plans.get(gang.key)
        if (
            current is not None
            and self._still_valid(current)
            and current.life.stands(self.clock() - current.created, self._free_gpus())
        ):
            if who.kind == "member":
                self._verify(current)
            elif current.verified and not self.caps.room_for_unseen(current):
                return self._waiting(current, pod)
            self.spares.reclaim(current)
            return current
        if current is not None:
            self._drop(current)
            self.replanned += 1
        admitted, verified = trust.is_admitted(self.store, gang), who.kind == "member"
        plans = self._plans.values()
        bounded = self.caps.before(plans, gang, pod, gpus, verified=verified, admitted=admitted)
        if bounded:
            return self._refusal(gang, bounded)
        made = self._make(gang, pod, gpus)
        if made is None:
            return None
        unseen = None if verified else PodRef.of(pod)
        made.life = made.life.asked_by(unseen, admitted=admitted, free_at=self._free_gpus())
        over = self.caps.after(plans, made)
        if over:
            self._drop(made)
            return self._refusal(gang, over)
        self._plans[gang.key] = made
        self.planned += 1
        if not made.feasible:
            self.unplaceable += 1
        if made.origin is Origin.REPAIR:
            self.repairs.update(r.step for r in made.repaired)
        if made.origin is Origin.RECORD:
            self.adopted += 1
        elif made.feasible:
            self._tell(made)  # told of unverified plans too; ``PlanRecorder`` writes only verified ones
        return made

    def _verify(self, plan: GangPlan) -> None:
        """A member of the gang asked: the plan is the gang's own now, and ``on_planned`` is told again (it records
        verified plans only)."""
        if plan.verified:
            return
        plan.life = plan.life.verify()
        members = in_gang(plan.gang.key).members(self.store)
        plan.pods = tuple(sorted(p.metadata.name for p in members if not p.spec.node_name))
        if plan.feasible and plan.origin in (Origin.PLANNED, Origin.REPAIR):
            self._tell(plan)

    def _waiting(self, plan: GangPlan, pod: Pod) -> GangPlan:
        """The answer to an unseen pod on a plan a member verified: no slot until the state shows the pod."""
        where = f"{pod.metadata.namespace}/{pod.metadata.name}"
        wait = Plan(False, f"waits until kilter's state shows pod {where}", plan.gang.key)
        return GangPlan(plan.gang, wait, [], self.clock(), self.store.generation, Life.refused())

    def _refusal(self, gang: GangId, why: str) -> GangPlan:
        self.refused += 1
        log.info("gang %s: not planned: %s", gang.key, why, extra={"gang": gang.key})
        return GangPlan(gang, Plan(False, why, gang.key), [], self.clock(), self.store.generation, Life.refused())

    def _free_gpus(self) -> int:
        return int(self.store.fleet().bitmap.domain_free_gpus.sum())

    def adopt(self, gang: GangId, plan: Plan) -> GangPlan | None:
        """Take a plan made elsewhere (the AdmissionCheck's) as the gang's, reserving its GPUs now.

        The gang's pods then find it when they reach the extender, so they land
        where the check said. Refused (None) if the gang already has a plan, or
        the plan no longer fits the fleet as it is.
        """
        if gang.key in self._plans or not plan.feasible:
            return None
        fleet = self.store.fleet()
        if any(n >= fleet.n_nodes for n in plan.node_indices):
            return None
        shaped = layout.of_plan(plan)
        slots = slots_of(shaped.slots(plan, fleet))
        if not self._reserve(gang, slots):
            return None
        now, generation, shapes = self.clock(), self.store.generation, shaped.shapes
        life = Life.made(plan, Origin.ADMISSION_CHECK, admitted=True)
        adopted = GangPlan(gang, plan, slots, now, generation, life, shapes=shapes)
        self._plans[gang.key] = adopted
        self.planned += 1
        self._tell(adopted)
        return adopted

    def _tell(self, plan: GangPlan) -> None:
        """Hand ``plan`` to ``on_planned``, with the UIDs of the objects its record goes on (the signature binds
        the record to its object)."""
        if self.on_planned is None:
            return
        plan.uids = self.records.uids_for(plan)
        self.on_planned(plan.gang, plan)

    def _make(self, gang: GangId, pod: Pod, gpus: int) -> GangPlan | None:
        """A new plan for the gang: its record taken up, a repair beside its running pods, or a fresh plan (which
        may hold the gang back for fewer domains); None: its pods are placed like single pods."""
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
        record = self.records.find(gang, members)
        adopted = self.records.take_up(gang, request, members, shaped, record, reserve=self._reserve, clock=self.clock)
        if adopted is not None:
            return adopted
        if bound:
            ahead = repair_queue.earlier(self.store, self.arrivals, gang, members or (), self.is_planned)
            for other, first, asks in ahead:  # planned one at a time: planning one may plan others
                self.plan_for(other, first, asks)
        fixed = (
            repairs.plan_repair(fleet, request, shaped, members or (), record, pod, self.spares.reclaimable(fleet, pod))
            if bound
            else None
        )
        result = fixed.plan if fixed is not None else plan_gang(fleet, request)
        if fixed is None and not bound and result.feasible:  # around kept reservations first, as plan_gangs does
            result = self._around_reservations(gang, pod, request, result, fleet)
            if not result.feasible:  # held back for a kept reservation; asked again within INFEASIBLE_RETRY_S
                life = Life.held_back(INFEASIBLE_RETRY_S)
                return GangPlan(gang, result, [], self.clock(), self.store.generation, life)
        wait = self.waits.for_gang(gang, pod, request, result) if self.waits is not None and not bound else None
        if wait is not None and wait.wait:  # nothing reserved, nothing recorded; asked again within INFEASIBLE_RETRY_S
            waits = Plan(False, wait.reason, gang.key, result.platform)
            return GangPlan(gang, waits, [], self.clock(), self.store.generation, Life.held_back(wait.remaining_s))
        slots: list[Slot] = []
        if result.feasible:
            slots = slots_of(shaped.slots(result, fleet))
            if fixed is not None:
                taking_back(slots, fixed.repaired)
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
        if fixed is None:
            return GangPlan(gang, result, slots, now, generation, Life.made(result), pods, shapes=shaped.shapes)
        victims = self.spares.victims(fleet, pod, slots)
        life = Life.made(result, Origin.REPAIR)
        made = GangPlan(
            gang,
            result,
            slots,
            now,
            generation,
            life,
            pods,
            shapes=shaped.shapes,
            repaired=fixed.repaired,
            victims=victims,
        )
        self.spares.follow(made)
        return made

    def _around_reservations(self, gang: GangId, pod: Pod, request: GangRequest, plan: Plan, fleet: Fleet) -> Plan:
        """``plan`` if it delays no kept reservation of another's; else one steered around them; else a plan that
        waits, naming the reservation (``Kept.steer_gang``, the simulator's rule)."""
        kept = self.kept()
        if kept is None:
            return plan
        runtime = self.waits.runtime_of(gang, pod, request) if self.waits is not None else None
        found = kept.steer_gang(fleet, gang.key, pod, request, plan, runtime, self.starts.clock())
        self.steered += found.outcome is Outcome.STEERED
        self.turned_away += found.waits
        return found.plan

    def reserved_for(self, fleet: Fleet, pod: Pod, gpus: int) -> tuple[npt.NDArray[np.bool_] | None, str]:
        """Per node, whether ``pod``, of no gang, would delay a kept reservation there, and which (``Kept.for_pod``);
        (None, "") where it delays none. ``InputError`` for a runtime it declares that does not read."""
        kept = self.kept()
        found = kept.for_pod(pod, gpus, self.starts.clock()) if kept is not None and fleet is kept.fleet else None
        return found if found is not None else (None, "")

    def below_reservations(
        self, fleet: Fleet, pod: Pod, gpus: int, scores: npt.NDArray[IntT], index: npt.NDArray[np.int32]
    ) -> npt.NDArray[IntT]:
        """A pod of no gang's node ``scores`` (aligned with fleet ``index``, -1 unknown), 0 where it would delay a
        kept reservation (``reserved_for``): the filters keep it off those nodes, and a scheduler that only asks
        for scores should still prefer the others."""
        reserved, _ = self.reserved_for(fleet, pod, gpus)
        if reserved is None:
            return scores
        return np.where(np.append(reserved, False)[index], 0, scores).astype(scores.dtype)

    def lending(self, fleet: Fleet, pod: Pod) -> npt.NDArray[np.bool_] | None:
        """Per domain, whether its spares are lent to ``pod`` (``SpareLending.lent_to``); None for none."""
        return self.spares.lent_to(fleet, pod)

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
        plans = self._plans.values() if gang is None else [p for p in (self._plans.get(gang),) if p is not None]
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
        for plan in self._plans.values():
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
        for key in [k for k, p in self._plans.items() if now - p.created > self.settings.timeout_s]:
            self._drop(self._plans[key])
        for plan in [p for p in self._plans.values() if not p.verified]:
            ns, name, uid = plan.life.unseen or ("", "", "")
            held = self.store.pod_named(ns, name) if name else None
            arrived = held is not None and (not uid or held.metadata.uid == uid)
            if arrived and held is not None and trust.asker(self.store, plan.gang, held).kind == "member":
                self._verify(plan)
            elif now - plan.created > self.settings.limits.grace_s:
                self.unverified_dropped += 1
                log.info("gang %s: pod %s/%s never reached kilter's state; plan dropped", plan.gang.key, ns, name)
                self._drop(plan)

    def _drop(self, plan: GangPlan) -> None:
        self.store.unreserve(plan.gang.key)
        for slot in plan.slots:
            slot.reserved = False
        self._plans.pop(plan.gang.key, None)

    def _reserve(self, gang: GangId, slots: Sequence[Slot]) -> bool:
        """Hold the open slots' GPUs in the store, all or none (not those a repair takes back by preemption: pods
        hold them until the scheduler evicts them)."""
        return self.store.reserve(gang.key, [(s.node, s.gpus) for s in slots if not s.uid and s.reserved])

    def _release(self, plan: GangPlan, slot: Slot) -> None:
        """Give a slot's GPUs back (a no-op when a rebuild already dropped the gang's reservation)."""
        if slot.reserved:
            self.store.release_slot(plan.gang.key, slot.node, slot.gpus)
        slot.reserved = False
