"""Gangs seen one pod at a time: recognise them, plan them whole, hold later pods to the plan.

kube-scheduler schedules pods one by one. The first pod of a gang that
reaches the extender triggers a plan for every pod of the gang still
unbound (the core planner, as ``kilter plan`` uses it); the plan's GPUs are
reserved in the fleet so nothing else takes them. Later pods of the gang
may only go to planned nodes with a free slot of their shape. A plan ends
when all its slots are bound, or after ``timeout_s``; when the fleet is
rebuilt and a planned node has gone or turned unusable, the plan is dropped
and the next pod re-plans.

Recognised (first match wins): ``kilter.dev/gang`` + ``kilter.dev/gang-size``
labels; Kueue pod groups (``kueue.x-k8s.io/pod-group-name`` label +
``pod-group-total-count`` annotation); LeaderWorkerSet groups (name +
group-index labels, ``size`` annotation); a Kueue Workload named by the
``kueue.x-k8s.io/workload`` annotation; a Volcano PodGroup named by
``scheduling.k8s.io/group-name`` (``minMember``); JobSet, PyTorchJob and
MPIJob pods by their job-name labels. Where the pod does not carry the size,
it comes from the owning object in the state, else from the number of the
gang's pods the state holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kilter.model.core_v1 import Pod, PodTemplateSpec
from kilter.model.errors import InputError
from kilter.model.jobs import PodSetSpec, read_job
from kilter.model.jobs import topology_request as _topology_request
from kilter.state.store import ClusterStore
from kilter.topology.fleet import ENDED_PHASES
from kilter.topology.plan import Plan, gang_request, plan_gang

__all__ = ["GANG_LABEL", "GANG_SIZE_LABEL", "GangBook", "GangId", "GangPlan", "identify"]

GANG_LABEL = "kilter.dev/gang"
GANG_SIZE_LABEL = "kilter.dev/gang-size"
KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_WORKLOAD = "kueue.x-k8s.io/workload"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
KUBEFLOW_JOB = "training.kubeflow.org/job-name"
MAX_GANG_SIZE = 100_000
INFEASIBLE_RETRY_S = 5.0  # a gang that did not fit is planned again after this long, not on every pod


@dataclass(frozen=True)
class GangId:
    """Which gang a pod belongs to and how many pods it has (None: not known yet)."""

    key: str
    source: str
    size: int | None
    pod_sets: tuple[PodSetSpec, ...] = ()
    placed: int | None = None  # pods already placed, when the caller knows (Volcano's session does)


def _size(raw: str | None, what: str) -> int | None:
    if raw is None:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_GANG_SIZE:
        raise InputError(f"{what} must be a whole number from 1 to {MAX_GANG_SIZE}, got {raw!r}")
    return int(raw)


def identify(pod: Pod, store: ClusterStore) -> GangId | None:
    meta = pod.metadata
    labels, notes, ns = meta.labels, meta.annotations, meta.namespace
    if GANG_LABEL in labels:
        raw = labels.get(GANG_SIZE_LABEL, notes.get(GANG_SIZE_LABEL))
        size = _size(raw, f"label {GANG_SIZE_LABEL}")
        if size is None:
            raise InputError(f"label {GANG_LABEL} needs {GANG_SIZE_LABEL} (the gang's pod count)")
        return GangId(f"{ns}/gang/{labels[GANG_LABEL]}", GANG_LABEL, size)
    if KUEUE_POD_GROUP in labels:
        size = _size(notes.get(KUEUE_POD_GROUP_COUNT), f"annotation {KUEUE_POD_GROUP_COUNT}")
        return GangId(f"{ns}/pod-group/{labels[KUEUE_POD_GROUP]}", KUEUE_POD_GROUP, size)
    if LWS_NAME in labels and LWS_GROUP in labels:
        size = _size(notes.get(LWS_SIZE), f"annotation {LWS_SIZE}")
        return GangId(f"{ns}/lws/{labels[LWS_NAME]}/{labels[LWS_GROUP]}", LWS_NAME, size)
    if KUEUE_WORKLOAD in notes:
        name = notes[KUEUE_WORKLOAD]
        return _from_object(store, ("kueue.x-k8s.io", "Workload", ns, name), f"{ns}/workload/{name}", KUEUE_WORKLOAD)
    if VOLCANO_GROUP in notes:
        name = notes[VOLCANO_GROUP]
        group = store.get("scheduling.volcano.sh", "PodGroup", ns, name)
        spec = group.get("spec") if group else None
        member = spec.get("minMember") if isinstance(spec, Mapping) else None
        size = member if isinstance(member, int) and 1 <= member <= MAX_GANG_SIZE else None
        return GangId(f"{ns}/podgroup/{name}", VOLCANO_GROUP, size)
    for label, kind in ((JOBSET_NAME, "jobset"), (KUBEFLOW_JOB, "kubeflow")):
        if label in labels:
            return GangId(f"{ns}/{kind}/{labels[label]}", label, None)
    return None


def _from_object(store: ClusterStore, key: tuple[str, str, str, str], gang: str, source: str) -> GangId:
    obj = store.get(*key)
    if obj is None:
        return GangId(gang, source, None)
    spec = read_job(obj)
    pod_sets = spec.gangs[0] if spec.gangs else ()
    return GangId(gang, source, sum(ps.count for ps in pod_sets) or None, pod_sets)


def gang_of(pod: Pod) -> Callable[[Pod], bool]:
    """A predicate: does another pod carry the same gang labels as ``pod``."""
    labels, notes = pod.metadata.labels, pod.metadata.annotations
    keys = [k for k in (GANG_LABEL, KUEUE_POD_GROUP, LWS_NAME, LWS_GROUP, JOBSET_NAME, KUBEFLOW_JOB) if k in labels]
    notes_keys = [k for k in (KUEUE_WORKLOAD, VOLCANO_GROUP) if k in notes]
    ns = pod.metadata.namespace

    def same(other: Pod) -> bool:
        m = other.metadata
        return (
            m.namespace == ns
            and all(m.labels.get(k) == labels[k] for k in keys)
            and all(m.annotations.get(k) == notes[k] for k in notes_keys)
        )

    return same


@dataclass
class Slot:
    node: str
    node_index: int
    gpus: int
    uid: str = ""
    reserved: bool = True


@dataclass
class GangPlan:
    gang: GangId
    plan: Plan
    slots: list[Slot]
    created: float
    generation: int

    @property
    def feasible(self) -> bool:
        return self.plan.feasible

    def nodes_for(self, uid: str, gpus: int) -> list[int]:
        """Planned nodes this pod may use: its own slot if it has one, else every free slot of its shape."""
        own = [s.node_index for s in self.slots if s.uid == uid]
        if own:
            return own
        return sorted({s.node_index for s in self.slots if not s.uid and s.gpus == gpus})

    def describe(self) -> str:
        taken = sum(1 for s in self.slots if s.uid)
        return f"gang {self.gang.key}: {self.plan.reason}; {taken}/{len(self.slots)} planned pods bound"


class GangBook:
    """Open plans, keyed by gang; every method runs on the server's one event-loop thread."""

    def __init__(self, store: ClusterStore, *, timeout_s: float = 300.0, clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.timeout_s = timeout_s
        self.clock = clock
        self.plans: dict[str, GangPlan] = {}
        self.planned = 0
        self.replanned = 0

    def plan_for(self, gang: GangId, pod: Pod, gpus: int) -> GangPlan | None:
        """The gang's current plan, making one if there is none or the old one no longer holds."""
        self.expire()
        current = self.plans.get(gang.key)
        if (
            current is not None
            and self._still_valid(current)
            and (current.feasible or self.clock() - current.created < INFEASIBLE_RETRY_S)
        ):
            return current
        if current is not None:
            self._drop(current)
            self.replanned += 1
        made = self._make(gang, pod, gpus)
        if made is not None:
            self.plans[gang.key] = made
            self.planned += 1
        return made

    def adopt(self, gang: GangId, plan: Plan) -> GangPlan | None:
        """Take a plan made elsewhere (the AdmissionCheck's) as the gang's, reserving its GPUs now.

        The gang's pods then find it when they reach the extender, so they land
        where the check said. Refused (None) if the gang already has a plan, or
        the plan no longer fits the fleet as it is.
        """
        if gang.key in self.plans or not plan.feasible:
            return None
        fleet = self.store.fleet()
        shapes = list(zip(plan.node_indices, plan.gpus, strict=True))
        need: dict[int, int] = {}
        for node, g in shapes:
            need[node] = need.get(node, 0) + g
        if any(n >= fleet.n_nodes or fleet.bitmap.node_free_gpus(n) < g for n, g in need.items()):
            return None
        slots = []
        for node, g in shapes:
            fleet.bitmap.allocate(node, g)
            slots.append(Slot(fleet.node_names[node], node, g))
        adopted = GangPlan(gang, plan, slots, self.clock(), self.store.generation)
        self.plans[gang.key] = adopted
        self.planned += 1
        return adopted

    def _make(self, gang: GangId, pod: Pod, gpus: int) -> GangPlan | None:
        fleet = self.store.fleet()
        if gang.placed is not None and gang.size is not None:
            bound, size = gang.placed, gang.size  # the caller knows: no need to look through every pod
        else:
            same = gang_of(pod)
            members = [p for p in self.store.pods() if same(p) and p.status.phase not in ENDED_PHASES]
            bound = gang.placed if gang.placed is not None else sum(1 for p in members if p.spec.node_name)
            size = gang.size if gang.size is not None else max(len(members), 1)
        if gang.size is None and size < 2:
            return None  # a lone pod of a gang whose size nothing tells: placed like any pod
        remaining = size - bound
        if remaining <= 0:
            return None
        if gang.pod_sets:
            pod_sets = _shrink(gang.pod_sets, bound)
        else:
            template = PodTemplateSpec(metadata=pod.metadata, spec=pod.spec)
            topology = _topology_request(template, remaining, path="$.Pod")
            pod_sets = (PodSetSpec("pods", remaining, template, topology),)
        request = gang_request(gang.key, pod_sets, fleet.catalog)
        result = plan_gang(fleet, request)
        slots: list[Slot] = []
        if result.feasible:
            for node, g in zip(result.node_indices, result.gpus, strict=True):
                fleet.bitmap.allocate(node, g)
                slots.append(Slot(fleet.node_names[node], node, g))
        return GangPlan(gang, result, slots, self.clock(), self.store.generation)

    def _still_valid(self, plan: GangPlan) -> bool:
        """After a fleet rebuild, re-reserve open slots by node name; invalid if a node went away or filled up."""
        fleet = self.store.fleet()
        if plan.generation == self.store.generation:
            return True
        ok = True
        for slot in plan.slots:
            slot.reserved = False
            index = fleet.node_index.get(slot.node)
            if index is None:
                ok = False
                continue
            slot.node_index = index
        if ok:
            for slot in plan.slots:
                if slot.uid:
                    continue
                usable = bool(fleet.bitmap.node_usable_flags[slot.node_index])
                if not usable or fleet.bitmap.node_free_gpus(slot.node_index) < slot.gpus:
                    ok = False
                    break
                fleet.bitmap.allocate(slot.node_index, slot.gpus)
                slot.reserved = True
        plan.generation = self.store.generation
        return ok

    def bound(self, uid: str, node_name: str, gpus: int) -> GangPlan | None:
        """A pod was bound: turn its slot's reservation into the pod's own booking."""
        for plan in self.plans.values():
            slot = next((s for s in plan.slots if s.uid == uid), None)
            if slot is None:
                slot = next((s for s in plan.slots if not s.uid and s.node == node_name and s.gpus == gpus), None)
            if slot is None:
                continue
            slot.uid = uid
            self._release(plan, slot)
            self.store.assume(uid, node_name, gpus)
            if all(s.uid for s in plan.slots):
                del self.plans[plan.gang.key]
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
            fleet = self.store.fleet()
            if plan.generation == self.store.generation and fleet.bitmap.node_free_gpus(slot.node_index) >= slot.gpus:
                fleet.bitmap.allocate(slot.node_index, slot.gpus)
                slot.reserved = True
            return True
        return False

    def expire(self) -> None:
        now = self.clock()
        for key in [k for k, p in self.plans.items() if now - p.created > self.timeout_s]:
            self._drop(self.plans[key])

    def _drop(self, plan: GangPlan) -> None:
        for slot in plan.slots:
            self._release(plan, slot)
        self.plans.pop(plan.gang.key, None)

    def _release(self, plan: GangPlan, slot: Slot) -> None:
        """Give a slot's GPUs back, if they are held in the fleet as it is now (a rebuild already dropped them)."""
        if slot.reserved and plan.generation == self.store.fleet_generation():
            self.store.fleet().bitmap.release(slot.node_index, slot.gpus)
        slot.reserved = False


def _shrink(pod_sets: tuple[PodSetSpec, ...], bound: int) -> tuple[PodSetSpec, ...]:
    """The pod sets minus ``bound`` pods already placed, taken from the last pod set first."""
    out = list(pod_sets)
    for i in range(len(out) - 1, -1, -1):
        if bound <= 0:
            break
        take = min(bound, out[i].count)
        out[i] = PodSetSpec(out[i].name, out[i].count - take, out[i].template, out[i].topology, out[i].path)
        bound -= take
    return tuple(ps for ps in out if ps.count > 0)
