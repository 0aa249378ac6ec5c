"""Repair plans for gangs whose pods run: replacement pods go next to the survivors, each to its own rank's place.

When a running gang loses pods (a node failed, a pod was deleted) its job
controller makes replacements with the same indices. A fresh plan for those
pods would put them wherever the fleet is best for them alone; the gang
wants them beside its survivors. So when the gang book plans a gang with
pods bound already, it asks here first: the rank each replacement holds
(``layout``), the node that rank held (the gang's newest plan record, of any
age: a gang may run for weeks after its plan), the survivors' nodes, and
``topology.repair`` chooses. The answer is an ordinary ``Plan`` (node per
replacement, in the layout's rank order), so the book reserves, records and
holds pods to it as to any plan, and a restarted kilter takes the recorded
repair up again, plus what was replaced by what, for ``explain`` and Events.

Pod sets that *require* a topology level keep that requirement in a repair:
their replacements stay inside the group (domain, block ...) holding most of
the survivors (``topology.repair.within``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter.gangs.layout import Layout
from kilter.gangs.ranks import Place, place_of
from kilter.gangs.records import PlanRecord
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError
from kilter.topology import eligibility, pod_gpus, repair
from kilter.topology.fleet import Fleet
from kilter.topology.plan import GangRequest, Plan, PlannedPodSet, with_clique

__all__ = ["Repair", "Repaired", "plan_repair", "recorded"]


@dataclass(frozen=True)
class Repaired:
    """One replacement: the rank it holds (None: the gang is unranked), the node that rank held ("" unknown), the
    node it goes to, that node's scale-up domain, which rung of the repair ladder chose it (in words, and its
    ``repair.STEPS`` name), and the pod that holds the rank now ("" when no pod in the state says it does yet)."""

    place: Place | None
    was: str
    now: str
    domain: str
    how: str
    pod: str = ""
    step: str = ""

    def __str__(self) -> str:
        rank = f", {self.place}" if self.place is not None else ""
        if self.was == self.now:
            return f"kept {self.now} in domain {self.domain}{rank} ({self.how})"
        was = f"replaced {self.was} by" if self.was else "placed on"
        return f"{was} {self.now} in domain {self.domain}{rank} ({self.how})"


@dataclass(frozen=True)
class Repair:
    plan: Plan
    repaired: tuple[Repaired, ...]


def plan_repair(
    fleet: Fleet,
    request: GangRequest,
    shaped: Layout,
    members: Sequence[Pod],
    record: PlanRecord | None,
    asker: Pod | None = None,
    reclaimable: Callable[[Iterable[int]], npt.NDArray[np.int32] | None] | None = None,
) -> Repair | None:
    """The repair plan for ``request`` (the gang's pods still to place), or None when there is nothing to repair
    next to (no bound GPU pod of the gang on a node of the fleet): the caller plans afresh.

    Each replacement is kept to the nodes its own pod admits (the pod that
    holds its rank, else ``asker``): a pod set pinned to a domain at
    admission (Kueue podSetUpdates put on the job's template) makes
    replacements with that pin, and a repair elsewhere would never bind.
    ``reclaimable`` gives, for the domains the gang runs in or its replaced
    ranks held, the GPUs per node the repair may take back by preemption
    (``GangBook``: lent spares; the ladder's ``reclaim`` rung).
    """
    request = with_clique(fleet, request)  # a ComputeDomain's clique rule, as the planner applies it
    at = fleet.node_index
    survivors = [at[n] for p in members if (n := p.spec.node_name) and n in at]
    on = fleet.bitmap.domain_platforms[fleet.node_domain[np.asarray(survivors, dtype=np.intp)]]
    platforms = np.bincount(on, minlength=len(fleet.platforms)).tolist()
    candidates = [i for i, p in enumerate(fleet.platforms) if p.device_resource == request.resource]
    platform = max(candidates, key=lambda i: (platforms[i], -i)) if candidates else -1
    if platform < 0 or not platforms[platform]:
        return None
    mask = _mask(fleet, platform, request, survivors)
    places: list[Place | None] = []
    gpus: list[int] = []
    for ps in request.pod_sets:
        ranks = shaped.ranks.get(ps.name)
        if ranks is not None and len(ranks) == ps.count:
            places += [Place(ps.name, r) for r in ranks]
        else:
            places += [None] * ps.count
        gpus += [ps.gpus_per_pod] * ps.count
    homes = _homes(record, shaped, places)
    holders = _holders(request, shaped, members)
    own = _PodMasks(fleet)
    wanted: list[repair.Replacement] = []
    for place, need in zip(places, gpus, strict=True):
        home = homes.get(place) if place is not None else None
        pod = holders.get(place) if place is not None else None
        allowed = own.of(pod if pod is not None else asker)
        wanted.append(repair.Replacement(need, fleet.node_index.get(home) if home else None, allowed))
    back = None
    if reclaimable is not None:
        held = [*survivors, *(w.home for w in wanted if w.home is not None)]
        back = reclaimable(np.unique(fleet.node_domain[np.asarray(held, dtype=np.intp)]).tolist())
    chosen = repair.repair(fleet, platform, survivors, wanted, node_ok=mask, reclaimable=back)
    name = fleet.platforms[platform].name
    if isinstance(chosen, str):
        why = _noted(f"repair: {chosen}", request)
        return Repair(Plan(False, why, request.name, name, ignored=request.ignored), ())
    names = {p: pod.metadata.name for p, pod in holders.items()}
    return _plan(fleet, request, name, survivors, chosen, places, homes, names)


def recorded(record: PlanRecord, shaped: Layout, fleet: Fleet) -> tuple[Repaired, ...]:
    """The replacements a repair plan's record lists (``records``' ``repaired``), as the repair said them: what a
    restarted kilter (or the other replica) tells in seats and ``explain`` when it takes the repair up."""
    places = shaped.record_places(len(record.slots))
    out = []
    for slot, was, how in record.repaired:
        now = record.slots[slot][0]
        index = fleet.node_index.get(now)
        domain = fleet.domain_of_node(index) if index is not None else "?"
        out.append(Repaired(places[slot], was, now, domain, how))
    return tuple(out)


class _PodMasks:
    """Each pod's own node mask (``eligibility.node_mask``), read once per selectors, affinity and tolerations."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._seen: dict[bytes, np.ndarray[tuple[int], np.dtype[np.bool_]] | None] = {}

    def of(self, pod: Pod | None) -> np.ndarray[tuple[int], np.dtype[np.bool_]] | None:
        if pod is None:
            return None
        key = eligibility.mask_key(pod.spec)
        if key in self._seen:
            return self._seen[key]
        meta = pod.metadata
        try:
            mask = eligibility.node_mask(self.fleet, pod.spec, path=f"pod {meta.namespace}/{meta.name}: spec")
        except InputError:
            mask = None  # its pod set's mask (from the template) still holds; the verdict ladder says what is wrong
        self._seen[key] = mask
        return mask


def _holders(request: GangRequest, shaped: Layout, members: Sequence[Pod]) -> dict[Place, Pod]:
    """The unbound pod that holds each rank (by its index)."""
    out: dict[Place, Pod] = {}
    for pod in members:
        if pod.spec.node_name:
            continue
        gpus = pod_gpus.count(pod.spec, request.resource)
        if isinstance(gpus, pod_gpus.Unreadable):
            continue
        place = place_of(pod, gpus, shaped.shapes)
        if isinstance(place, Place):
            out[place] = pod
    return out


def _mask(
    fleet: Fleet, platform: int, request: GangRequest, survivors: Sequence[int]
) -> np.ndarray[tuple[int], np.dtype[np.bool_]] | None:
    """The nodes every replacement may use: what the request allows (``node_ok``: a ComputeDomain's clique), its
    pod set's selectors and tolerations, and a required level kept."""
    mask = None if request.node_ok is None else request.node_ok.astype(bool)
    for ps in request.pod_sets:
        for m in (
            eligibility.node_mask(fleet, ps.spec, path=f"pod set {ps.name}: spec"),
            repair.within(fleet, platform, ps.topology.required, survivors) if ps.topology.required else None,
        ):
            if m is not None:
                mask = m if mask is None else (mask & m)
    return mask


def _homes(record: PlanRecord | None, shaped: Layout, places: Sequence[Place | None]) -> dict[Place, str]:
    """The node each of ``places`` held in the gang's last plan (none when the record does not list the gang
    whole): its slot at the rank's position in the gang's order."""
    if record is None or shaped.size != len(record.slots):
        return {}
    out = {}
    for place in places:
        at = shaped.position(place) if place is not None else None
        if place is not None and at is not None:
            out[place] = record.slots[at][0]
    return out


def _plan(
    fleet: Fleet,
    request: GangRequest,
    platform: str,
    survivors: Sequence[int],
    chosen: Sequence[repair.RepairChoice],
    places: Sequence[Place | None],
    homes: dict[Place, str],
    holders: dict[Place, str],
) -> Repair:
    names = fleet.node_names
    nodes = [c.node for c in chosen]
    pod_sets, gpus, pos = [], [], 0
    for ps in request.pod_sets:
        planned = tuple(names[n] for n in nodes[pos : pos + ps.count])
        pod_sets.append(PlannedPodSet(ps.name, ps.count, ps.gpus_per_pod, planned))
        gpus += [ps.gpus_per_pod] * ps.count
        pos += ps.count
    repaired = tuple(
        Repaired(
            p,
            homes.get(p, "") if p is not None else "",
            names[c.node],
            fleet.domain_of_node(c.node),
            repair.describe(fleet, c),
            holders.get(p, "") if p is not None else "",
            c.step,
        )
        for c, p in zip(chosen, places, strict=True)
    )
    held = np.unique(fleet.node_domain[np.asarray([*survivors, *nodes], dtype=np.intp)]).tolist()
    gang_domains = sorted(fleet.domain_ids[d] for d in held)
    steps = Counter(c.step for c in chosen)
    told = ", ".join(f"{steps[s]} {s}" for s in repair.STEPS if steps[s])
    reason = (
        f"repair: {len(nodes)} pods, {sum(gpus)} GPUs beside {len(survivors)} running ({told}); "
        f"the gang spans {len(gang_domains)} scale-up domain{'s' if len(gang_domains) != 1 else ''} of {platform}"
    )
    plan = Plan(
        True,
        _noted(reason, request),
        request.name,
        platform,
        tuple(pod_sets),
        tuple(gang_domains),
        ignored=request.ignored,
        node_indices=tuple(nodes),
        gpus=tuple(gpus),
    )
    return Repair(plan, repaired)


def _noted(reason: str, request: GangRequest) -> str:
    """The reason with what narrowed the request (``GangRequest.note``), as ``plan_gang`` says it."""
    return f"{reason} ({request.note})" if request.note else reason
