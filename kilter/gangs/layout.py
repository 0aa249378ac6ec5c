"""A gang's pod sets as the book plans them: each pod set whole (what ranks count in), and what is left to place.

Pod sets come from the gang's owner (a Workload's, a Volcano job's pending
tasks) or, for gangs named by labels alone (``kilter.dev/gang``, Kueue pod
groups, LeaderWorkerSet groups, JobSet and Kubeflow jobs), from the gang's
pods in the state: grouped by what their index counts within (replicated
job, replica type; ``ranks.group_of``) and by GPU count, the gang's pods
not in the state yet in the shape of the pod that asked. So a gang whose
pods differ in GPU count is planned in its real shapes. Such a pod set is
named after its group (``pods`` without one), with ``-<N>gpu`` added where
one group has pods of several GPU counts; they are listed with the roles
of ``ranks.ROLE_ORDER`` first, then by their lowest index, then by name.
Pods asking another device than the asking pod's (or an unreadable amount)
are counted in its shape, as every pod was before.

Ranks: a plan made with none of the gang's pods bound takes every rank of
each pod set, 0 first, in its rank order. Where pods are bound already, each
bound GPU pod must hold a rank (``ranks.place_of``) for the plan to be
ranked: its pod sets then plan the ranks not held, in order, and the bound
pods' slots are listed too (``Layout.taken``), so that a plan lists the
gang's every rank in order — what its record keeps across a restart. A bound
pod without one, or two holding one rank, leave the plan unranked: its pods
take any free slot of their shape, as before ranks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from kilter.gangs import pod_facts
from kilter.gangs.identity import GangId
from kilter.gangs.ranks import ROLE_ORDER, Place, Shape, Taken, group_of, read_index
from kilter.model.core_v1 import Pod, PodTemplateSpec
from kilter.model.errors import InputError
from kilter.model.jobs import PodSetSpec, TopologyRequest, topology_request
from kilter.topology.catalog import Catalog
from kilter.topology.fleet import Fleet
from kilter.topology.plan import Plan

__all__ = ["Layout", "SlotSpec", "Taken", "of_gang", "of_plan", "shrink"]

SlotSpec = tuple[str, int, int, str, Place | None]  # node, node index, GPUs, uid of the pod holding it ("": open), rank


@dataclass(frozen=True)
class Layout:
    """``shapes``: every pod set of the gang, whole, in order; ``to_place``: the pods the plan is for, as pod
    sets; ``ranks``: per pod set to place, the ranks its planned pods take in the plan's order (empty: the
    gang is planned unranked); ``taken``: the bound pods of a ranked gang."""

    shapes: tuple[Shape, ...]
    to_place: tuple[PodSetSpec, ...]
    ranks: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    taken: tuple[Taken, ...] = ()

    def places(self, plan: Plan) -> list[Place | None]:
        """Per pod of ``plan`` (its order), the rank it plans; None for a pod set planned without ranks."""
        out: list[Place | None] = []
        for ps in plan.pod_sets:
            ranks = self.ranks.get(ps.name)
            if ranks is None or len(ranks) != ps.count:
                out.extend([None] * ps.count)
            else:
                out.extend(Place(ps.name, r) for r in ranks)
        return out

    def order(self) -> list[Place]:
        """Every rank of the gang's GPU pod sets, pod set after pod set: the order of a ranked plan's slots."""
        return [Place(s.name, r) for s in self.shapes if s.gpus > 0 for r in range(s.pods)]

    @cached_property
    def _spans(self) -> dict[str, tuple[int, int]]:
        """Where each GPU pod set's ranks start in ``order``, and how many it has."""
        spans, at = {}, 0
        for s in self.shapes:
            if s.gpus > 0:
                spans[s.name] = (at, s.pods)
                at += s.pods
        return spans

    @cached_property
    def size(self) -> int:
        """How many ranks ``order`` lists (without listing them: a 512-pod repair asks for a few)."""
        return sum(pods for _, pods in self._spans.values())

    def position(self, place: Place) -> int | None:
        """``place``'s position in ``order`` (None: no GPU pod set of the gang has it)."""
        span = self._spans.get(place.pod_set)
        return span[0] + place.rank if span is not None and 0 <= place.rank < span[1] else None

    def record_places(self, n: int) -> list[Place | None]:
        """The rank of each of a record's ``n`` slots: its position in ``order`` when the record lists the whole
        gang (as a ranked plan's does), else unknown."""
        return list(self.order()) if self.size == n else [None] * n

    def slots(self, plan: Plan, fleet: Fleet) -> list[SlotSpec]:
        """The slots of a feasible ``plan``: one open slot per planned pod and one per ``taken`` rank (on a node
        of the fleet), in rank order when the gang is ranked (else the plan's order)."""
        names = fleet.node_names
        out: list[SlotSpec] = [
            (names[n], n, g, "", p) for n, g, p in zip(plan.node_indices, plan.gpus, self.places(plan), strict=True)
        ]
        if not self.taken:
            return out
        at = fleet.node_index
        out += [(t.node, at[t.node], t.gpus, t.uid, t.place) for t in self.taken if t.node in at]
        return self._in_order(out)

    def _in_order(self, slots: list[SlotSpec]) -> list[SlotSpec]:
        """``slots`` in rank order, those without a rank last (in their order): each put at its position, as
        sorting by it would, unless two share one."""
        placed: list[SlotSpec | None] = [None] * self.size
        rest: list[SlotSpec] = []
        position = self.position
        for slot in slots:
            at = position(slot[4]) if slot[4] is not None else None
            if at is None:
                rest.append(slot)
            elif placed[at] is not None:
                return sorted(slots, key=lambda s: self._sort_key(s[4]))
            else:
                placed[at] = slot
        return [s for s in placed if s is not None] + rest

    def _sort_key(self, place: Place | None) -> int:
        at = self.position(place) if place is not None else None
        return at if at is not None else self.size


def shrink(pod_sets: Sequence[PodSetSpec], bound: int) -> tuple[PodSetSpec, ...]:
    """The pod sets minus ``bound`` pods already placed, taken from the last pod set first."""
    out = list(pod_sets)
    for i in range(len(out) - 1, -1, -1):
        if bound <= 0:
            break
        take = min(bound, out[i].count)
        out[i] = replace(out[i], count=out[i].count - take)
        bound -= take
    return tuple(ps for ps in out if ps.count > 0)


def of_plan(plan: Plan) -> Layout:
    """The layout of a plan made for a whole gang elsewhere (the AdmissionCheck's): every rank of each pod set."""
    shapes = tuple(Shape(ps.name, ps.count, ps.gpus_per_pod) for ps in plan.pod_sets)
    return Layout(shapes, (), {s.name: tuple(range(s.pods)) for s in shapes})


def of_gang(
    gang: GangId, pod: Pod, gpus: int, members: Sequence[Pod] | None, *, size: int, bound: int, catalog: Catalog
) -> Layout:
    """The gang's layout for a plan asked by ``pod`` (``gpus`` GPUs); ``members`` are the gang's pods in the state
    (None: the caller counted them: ``bound`` of ``size`` are placed). InputError for a pod's bad TAS annotations."""
    resources = sorted(catalog.device_resources)
    if gang.pod_sets:
        shapes = tuple(
            Shape(ps.name, ps.count, pod_facts.spec_gpu_ask(ps.template.spec, resources)[1]) for ps in gang.pod_sets
        )
        if members is None:
            to_place = shrink(gang.pod_sets, bound)
            return Layout(shapes, to_place, {ps.name: tuple(range(ps.count)) for ps in to_place} if not bound else {})
        held = _holds(shapes, members, resources)
        if held is None:
            return Layout(shapes, shrink(gang.pod_sets, bound))
        ranks, taken = held
        to_place = tuple(replace(ps, count=len(ranks[ps.name])) for ps in gang.pod_sets if ranks[ps.name])
        return Layout(shapes, to_place, {ps.name: ranks[ps.name] for ps in to_place}, taken)
    return _built(pod, gpus, list(members or ()), size=size, bound=bound, resources=resources)


def _holds(
    shapes: tuple[Shape, ...], members: Sequence[Pod], resources: Sequence[str]
) -> tuple[dict[str, tuple[int, ...]], tuple[Taken, ...]] | None:
    """Per pod set, the ranks no bound pod holds, and the bound GPU pods' ranks; None when a bound GPU pod holds
    none, or two hold one."""
    taken: list[Taken] = []
    held_resources = tuple(resources)
    held_by = pod_facts.held
    for m in members:  # a repair decision runs this over every member: one pass, one remembered fact a pod
        if not m.spec.node_name:
            continue
        g, place = held_by(m, held_resources, shapes)
        if not isinstance(place, Taken):
            if g != 0:  # GPUs held in no rank, or GPUs nobody can count (None): no rank is known free
                return None
            continue
        taken.append(place)
    held = {t.place for t in taken}
    if len(held) != len(taken):
        return None
    ranks = {}
    for s in shapes:
        mine = {p.rank for p in held if p.pod_set == s.name} if len(shapes) > 1 else {p.rank for p in held}
        ranks[s.name] = tuple(sorted(set(range(s.pods)).difference(mine)))
    return ranks, tuple(t for t in taken if t.gpus > 0)


def _built(pod: Pod, gpus: int, members: list[Pod], *, size: int, bound: int, resources: Sequence[str]) -> Layout:
    """Pod sets of a gang named by labels alone, from its pods in the state (module docstring)."""
    meta = pod.metadata
    if not any(m.metadata.name == meta.name and m.metadata.namespace == meta.namespace for m in members):
        members = [*members, pod]
    if len(members) > size:  # more pods than the gang's declared size: plan it as before, in the asking pod's shape
        return Layout((Shape("pods", size, gpus),), (_pod_set("pods", size - bound, pod),) if size > bound else ())
    resource = pod_facts.spec_gpu_ask(pod.spec, resources)[0]
    mine = (group_of(pod), gpus)
    groups: dict[tuple[str, int], list[Pod]] = {mine: []}
    held_resources, member = tuple(resources), pod_facts.member
    for m in members:
        r, g, group = member(m, held_resources)
        groups.setdefault((group, g) if r in (resource, "") else mine, []).append(m)
    count = {k: len(pods) + (size - len(members) if k == mine else 0) for k, pods in groups.items()}
    keys = sorted(groups, key=lambda k: (_role(k[0]), _lowest(groups[k]), k)) if len(groups) > 1 else list(groups)
    several = {group for group, _ in keys if sum(1 for g, _ in keys if g == group) > 1}
    name = {k: (k[0] or "pods") + (f"-{k[1]}gpu" if k[0] in several else "") for k in keys}
    shapes = tuple(Shape(name[k], count[k], k[1]) for k in keys)
    left = {name[k]: count[k] - sum(1 for m in groups[k] if m.spec.node_name) for k in keys}
    to_place = tuple(
        _pod_set(name[k], left[name[k]], pod) if k == mine else _their(name[k], left[name[k]], groups[k])
        for k in keys
        if left[name[k]] > 0
    )
    held = _holds(shapes, members, resources)
    if held is None or any(len(held[0][s.name]) != max(left[s.name], 0) for s in shapes if s.gpus > 0):
        return Layout(shapes, to_place)
    return Layout(shapes, to_place, {ps.name: held[0][ps.name] for ps in to_place}, held[1])


def _pod_set(name: str, count: int, rep: Pod) -> PodSetSpec:
    """A pod set of ``count`` pods shaped as ``rep``, with the TAS request its annotations make."""
    template = PodTemplateSpec(metadata=rep.metadata, spec=rep.spec)
    return PodSetSpec(name, count, template, topology_request(template, count, path="$.Pod"))


def _their(name: str, count: int, pods: Sequence[Pod]) -> PodSetSpec:
    """A pod set of other pods than the asker's, shaped as the first of them by name; TAS annotations the webhook
    would refuse on one of them leave that pod set without a topology request, rather than failing the asker."""
    rep = min(pods, key=lambda m: m.metadata.name)
    try:
        return _pod_set(name, count, rep)
    except InputError:
        return PodSetSpec(name, count, PodTemplateSpec(metadata=rep.metadata, spec=rep.spec), TopologyRequest())


def _role(group: str) -> int:
    return ROLE_ORDER.index(group) if group in ROLE_ORDER else len(ROLE_ORDER)


def _lowest(pods: Sequence[Pod]) -> int:
    """The lowest index among the pods (past any index when none has one): the order of ``""`` groups' shapes."""
    found = [i.index for i in map(read_index, pods) if i is not None and not isinstance(i, str)]
    return min(found, default=1 << 31)
