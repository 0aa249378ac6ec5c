"""Whether a recorded plan still fits the fleet as it is now, for the gang's pods still to place."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kilter.gangs.layout import Layout, SlotSpec
from kilter.gangs.ranks import Place, place_of
from kilter.gangs.records import PlanRecord
from kilter.model.core_v1 import Pod
from kilter.topology import eligibility, pod_gpus
from kilter.topology.fleet import Fleet
from kilter.topology.plan import GangRequest, Plan

__all__ = ["Fit", "fit"]


@dataclass(frozen=True)
class Fit:
    """How a record fits the fleet now: slots the gang's bound pods hold, the open slots to reserve (in the
    record's order), and those open slots as a plan."""

    taken: tuple[SlotSpec, ...]
    open: tuple[SlotSpec, ...]
    plan: Plan

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(g for _, _, g, _, _ in self.open)


def fit(record: PlanRecord, request: GangRequest, members: Sequence[Pod], fleet: Fleet, *, shaped: Layout) -> Fit | str:
    """Whether the gang's pods still to place can take up ``record`` on ``fleet``; the reason when not.

    Bound pods of the gang take the slots on their nodes (by name order) as
    long as more slots are left than pods to place: a plan made after some
    pods were bound has no slots for them. A bound pod takes the slot of its
    own rank there first. The open slots must then match the pods to place
    in number and GPUs, and each slot's node must still exist, be usable,
    carry the gang's GPU kind, admit the pods (selectors, affinity, taints)
    and have the GPUs free. Each slot keeps the rank its position in the
    record gives it (``Layout.record_places``: a record that lists the whole
    gang lists it in rank order).
    """
    wanted = sorted(ps.gpus_per_pod for ps in request.pod_sets for _ in range(ps.count))
    places = shaped.record_places(len(record.slots))
    open_slots = [(node, gpus, place) for (node, gpus), place in zip(record.slots, places, strict=True)]
    taken: list[SlotSpec] = []
    for pod in sorted((p for p in members if p.spec.node_name), key=lambda p: p.metadata.name):
        if len(open_slots) <= len(wanted):
            break
        meta = pod.metadata
        gpus = pod_gpus.count(pod.spec, request.resource)
        if isinstance(gpus, pod_gpus.Unreadable):
            continue  # what it holds, and so which slot, is unknown
        own = place_of(pod, gpus, shaped.shapes)
        here = [i for i, (node, g, _) in enumerate(open_slots) if (node, g) == (pod.spec.node_name, gpus)]
        at = next((i for i in here if isinstance(own, Place) and open_slots[i][2] == own), here[0] if here else None)
        if at is None:
            continue
        node, _, place = open_slots.pop(at)
        index = fleet.node_index.get(node)
        if index is not None:
            taken.append((node, index, gpus, meta.uid or f"{meta.namespace}/{meta.name}", place))
    if sorted(g for _, g, _ in open_slots) != wanted:
        shapes = sorted({g for _, g, _ in open_slots})
        return f"{len(open_slots)} open slots of {shapes} GPUs for {len(wanted)} pods of {sorted(set(wanted))}"
    problem = _unfit_node(fleet, request, [(node, g) for node, g, _ in open_slots])
    if problem:
        return problem
    slots = tuple((node, fleet.node_index[node], g, "", place) for node, g, place in open_slots)
    return Fit(tuple(taken), slots, _plan(record, request, fleet, slots))


def _plan(record: PlanRecord, request: GangRequest, fleet: Fleet, slots: Sequence[SlotSpec]) -> Plan:
    """The open slots of a record taken up, as the plan the gang book holds."""
    indices = tuple(index for _, index, _, _, _ in slots)
    gpus = tuple(g for _, _, g, _, _ in slots)
    domains = tuple(sorted({fleet.domain_of_node(i) for i in indices}))
    reason = (
        f"the plan recorded at {record.at}: {len(slots)} pods, {sum(gpus)} GPUs in "
        f"{len(domains)} scale-up domain{'s' if len(domains) != 1 else ''}"
    )
    platform = fleet.platform_of_node(indices[0]).name if indices else None
    return Plan(True, reason, request.name, platform, domains=domains, node_indices=indices, gpus=gpus)


def _unfit_node(fleet: Fleet, request: GangRequest, slots: Sequence[tuple[str, int]]) -> str:
    """Why the slots' nodes cannot take the pods now ("" if they can)."""
    mask: eligibility.Mask | None = None
    for ps in request.pod_sets:
        m = eligibility.node_mask(fleet, ps.spec, path=f"pod set {ps.name}: spec")
        if m is not None:
            mask = m if mask is None else (mask & m)
    need: dict[int, int] = {}
    for node, gpus in slots:
        index = fleet.node_index.get(node)
        if index is None:
            return f"node {node} is gone"
        if not fleet.bitmap.node_usable_flags[index]:
            return f"node {node} is not usable"
        if fleet.platform_of_node(index).device_resource != request.resource:
            return f"node {node} has no {request.resource}"
        if mask is not None and not mask[index]:
            return f"the pods' selectors or tolerations exclude node {node}"
        need[index] = need.get(index, 0) + gpus
    for index, gpus in need.items():
        free = int(fleet.bitmap.node_free_gpus(index))
        if free < gpus:
            return f"node {fleet.node_names[index]} has {free} GPUs free; the plan puts {gpus} there"
    return ""
