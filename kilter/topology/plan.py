"""Gang placement plans: from pod sets to one node per pod, or a reason why not.

This module translates names to planner numbers and back; the decision
itself is ``_native.gang.plan_gang`` (objectives in its docstring). A plan
is a what-if on the fleet; ``commit`` books it when pods are really bound.

A plan lists each pod set's nodes in rank order (``rank_order``): pod i of
a pod set is its rank i, each chosen scale-up domain holds a consecutive
range of ranks, the domains of one block (and of each level above) are
adjacent, and the pods on one node are adjacent. Neighbouring ranks, whose
NCCL ring links are the busiest, then share NVLink wherever the plan lets
them; ``kilter.gangs.ranks`` holds each pod to its rank's node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from kilter._native import gang
from kilter.model.core_v1 import PodSpec
from kilter.model.errors import InputError
from kilter.model.jobs import PodSetSpec, TopologyRequest
from kilter.topology import eligibility, pod_gpus, spares
from kilter.topology.catalog import Catalog, Platform
from kilter.topology.fleet import Fleet

MAX_GANG_PODS = 1_000_000
MAX_POD_GPUS = 65_536
LEVEL_NONE = int(gang.NONE)
LEVEL_DOMAIN = int(gang.DOMAIN)

__all__ = [
    "LEVEL_DOMAIN",
    "LEVEL_NONE",
    "MAX_GANG_PODS",
    "MAX_POD_GPUS",
    "GangRequest",
    "Plan",
    "PlannedPodSet",
    "PodSetRequest",
    "commit",
    "gang_request",
    "place_pods",
    "plan_gang",
    "rank_order",
]


@dataclass(frozen=True)
class PodSetRequest:
    name: str
    count: int
    gpus_per_pod: int
    topology: TopologyRequest
    spec: PodSpec


@dataclass(frozen=True)
class GangRequest:
    """Pods that must start together; all GPU pod sets ask for the same device resource."""

    name: str
    resource: str
    pod_sets: tuple[PodSetRequest, ...]
    platform: str | None = None
    ignored: tuple[str, ...] = ()
    one_domain: bool = False  # all GPU pod sets together in one scale-up domain (a ComputeDomain's clique)
    node_ok: npt.NDArray[np.uint8] | None = field(default=None, compare=False, repr=False)  # [node]: 1 = may use
    note: str = ""  # who narrowed the request and how (``one_domain``, ``node_ok``), added to the plan's reason
    spares_lent: npt.NDArray[np.bool_] | None = field(default=None, compare=False, repr=False)  # [domain] (``spares``)


@dataclass(frozen=True)
class PlannedPodSet:
    """One pod set's nodes, one per pod, in rank order: ``nodes[i]`` is the node of the pod set's rank i."""

    name: str
    count: int
    gpus_per_pod: int
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """The answer for one gang; when infeasible, ``reason`` says what stops it.

    Pod i of a pod set is rank i: ``pod_sets[k].nodes[i]`` is where the pod
    set's rank i goes, and ``node_indices``/``gpus`` list the same pods,
    pod set after pod set, in that order.
    """

    feasible: bool
    reason: str
    gang: str
    platform: str | None = None
    pod_sets: tuple[PlannedPodSet, ...] = ()
    domains: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    group_level: str | None = None
    ignored: tuple[str, ...] = ()
    node_indices: tuple[int, ...] = field(default=(), repr=False)
    gpus: tuple[int, ...] = field(default=(), repr=False)


def gang_request(
    name: str, pod_sets: Sequence[PodSetSpec], catalog: Catalog, *, platform: str | None = None
) -> GangRequest:
    """The GPU pod sets of a gang; pod sets without GPUs are listed as ignored."""
    resources = sorted(catalog.device_resources)
    chosen: str | None = catalog.get(platform).device_resource if platform else None
    requests: list[PodSetRequest] = []
    ignored: list[str] = []
    for ps in pod_sets:
        path = f"pod set {ps.name}: spec"
        asked = None
        if ps.count > 0:
            asked = pod_gpus.ask(ps.template.spec, resources, path=path, who=f"pod set {ps.name}")
        if asked is None:
            ignored.append(ps.name)
            continue
        resource, n = asked
        if n > MAX_POD_GPUS:
            raise InputError(
                f"pod set {ps.name} asks for {n} {resource} per pod; no node offers more than {MAX_POD_GPUS}"
            )
        if chosen is not None and resource != chosen:
            raise InputError(f"pod set {ps.name} asks for {resource}, but the gang uses {chosen}")
        chosen = resource
        requests.append(PodSetRequest(ps.name, ps.count, n, ps.topology, ps.template.spec))
    if chosen is None or not requests:
        raise InputError(f"{name}: no pod set asks for GPUs ({', '.join(resources)})")
    pods = sum(ps.count for ps in requests)
    if pods > MAX_GANG_PODS:
        raise InputError(f"{name}: a gang of {pods} pods is beyond kilter's limit of {MAX_GANG_PODS}")
    return GangRequest(name, chosen, tuple(requests), platform, tuple(ignored))


def _level_name(fleet: Fleet, level: int) -> str:
    if level == gang.NODE:
        return "node"
    if level == gang.DOMAIN:
        return "scale-up domain"
    return fleet.levels.describe(fleet.levels.up_keys[level - gang.UP])


def _levels(
    fleet: Fleet, request: GangRequest, platform: Platform
) -> tuple[list[tuple[int, int, int, int]], str | None]:
    """Per pod set (required, preferred, slice size, slice level), or the reason a level is unknown."""
    out = []
    for ps in request.pod_sets:
        tr = ps.topology
        levels = []
        for key in (tr.required, tr.preferred, tr.slice_level):
            if key is None:
                levels.append(int(gang.NONE))
                continue
            level = fleet.levels.level_of(key, platform)
            if level is None:
                known = ", ".join(fleet.levels.known(platform))
                return (
                    [],
                    f"pod set {ps.name}: {key} is not a topology level of this {platform.name} fleet (known: {known})",
                )
            levels.append(level)
        required, preferred, slice_level = levels
        if required == gang.NONE and preferred == gang.NONE and not tr.unconstrained:
            preferred = int(gang.DOMAIN)
        if request.one_domain and (required == gang.NONE or required > gang.DOMAIN):
            required, preferred = int(gang.DOMAIN), min(preferred, int(gang.DOMAIN))
        if slice_level != gang.NONE and required != gang.NONE and slice_level > required:
            return (
                [],
                f"pod set {ps.name}: slice level {tr.slice_level} is above the required level {tr.required}",
            )
        out.append((required, preferred, tr.slice_size or 1, slice_level))
    return out, None


def _failure(fleet: Fleet, request: GangRequest, platform: Platform, answer: gang.PlanResult) -> str:
    ps = request.pod_sets[answer.pod_set]
    shape = f"{answer.need} pods x {ps.gpus_per_pod} GPUs"
    if answer.status == gang.REQUIRED_TOO_SMALL:
        where = _level_name(fleet, answer.level)
        return (
            f"pod set {ps.name} requires one {where} for {shape}; the roomiest {where} holds {answer.offered} such pods"
        )
    if answer.status == gang.SLICES_DO_NOT_FIT:
        where = _level_name(fleet, answer.level) if answer.level >= 0 else "domain"
        return (
            f"pod set {ps.name}: {shape} fit in total, but not as slices of {ps.topology.slice_size} pods "
            f"each within one {where}"
        )
    return f"pod set {ps.name} needs {shape}; idle, healthy {platform.name} nodes hold {answer.offered} such pods"


def plan_gang(fleet: Fleet, request: GangRequest, *, hold_spares: bool = True) -> Plan:
    """Plan the gang on the best platform the fleet offers for its device resource.

    Nodes are those the pod sets' selectors admit and ``request.node_ok``
    allows. A ``one_domain`` request requires one scale-up domain of each pod
    set; when the best plan still puts two pod sets in different domains, each
    domain with room for the whole gang is tried alone, fewest free GPUs first
    (best fit; ties by index), and the first that holds it is the plan.
    ``hold_spares``: keep the fleet's spare nodes (``spares``) out, as every
    new plan does, but those ``request.spares_lent`` (its pods are
    preemptible there); a repair of a running gang may use them.
    """
    plan = _plan_gang(fleet, request, hold_spares)
    return replace(plan, reason=f"{plan.reason} ({request.note})") if request.note else plan


def _plan_gang(fleet: Fleet, request: GangRequest, hold_spares: bool) -> Plan:
    wanted = fleet.catalog.get(request.platform).name if request.platform else None
    candidates = [
        (i, p)
        for i, p in enumerate(fleet.platforms)
        if p.device_resource == request.resource and (wanted is None or p.name == wanted)
    ]
    if not candidates:
        return Plan(
            False, f"the fleet has no {wanted or request.resource} nodes", request.name, ignored=request.ignored
        )

    mask = None if request.node_ok is None else request.node_ok.astype(bool)
    if mask is not None and mask.shape != (fleet.n_nodes,):
        raise ValueError(f"node_ok has {mask.shape[0]} nodes, the fleet {fleet.n_nodes}")
    for ps in request.pod_sets:
        m = eligibility.node_mask(fleet, ps.spec, path=f"pod set {ps.name}: spec")
        if m is not None:
            mask = m if mask is None else (mask & m)
    node_ok = None if mask is None else np.ascontiguousarray(mask, dtype=np.uint8)
    if hold_spares:
        node_ok = spares.usable_mask(fleet, node_ok, lent=request.spares_lent)
    feasible, reasons = _plan_on(fleet, request, candidates, node_ok)
    together = [kv for kv in feasible if len(kv[1].domains) <= 1 or not request.one_domain]
    if together:
        return min(together, key=lambda kv: kv[0])[1]
    if feasible:
        return _in_one_domain(fleet, request, candidates, node_ok)
    held = spares.note(fleet, lent=request.spares_lent) if hold_spares else ""
    return Plan(False, "; ".join([*reasons, *([held] if held else [])]), request.name, ignored=request.ignored)


def _plan_on(
    fleet: Fleet, request: GangRequest, candidates: Sequence[tuple[int, Platform]], node_ok: np.ndarray | None
) -> tuple[list[tuple[tuple[int, int, int], Plan]], list[str]]:
    """Each candidate platform's plan, ranked (domains, groups, platform), and why the others failed."""
    feasible: list[tuple[tuple[int, int, int], Plan]] = []
    reasons: list[str] = []
    for index, platform in candidates:
        levels, problem = _levels(fleet, request, platform)
        if problem:
            reasons.append(problem)
            continue
        ask = gang.PodSets((ps.count, ps.gpus_per_pod, *lv) for ps, lv in zip(request.pod_sets, levels, strict=True))
        answer = gang.plan_gang(fleet.bitmap, ask, index, node_ok)
        if not answer.ok:
            reasons.append(_failure(fleet, request, platform, answer))
            continue
        result = _plan_from_nodes(fleet, request, platform, answer.nodes)
        feasible.append(((len(result.domains), len(result.groups), index), result))
    return feasible, reasons


def _in_one_domain(
    fleet: Fleet, request: GangRequest, candidates: Sequence[tuple[int, Platform]], node_ok: np.ndarray | None
) -> Plan:
    """The plan of a ``one_domain`` gang whose pod sets the planner put in several domains: each domain with
    room for every GPU the gang asks on nodes it may use, tried alone, fewest such free GPUs first; the first
    that holds it all. (Free GPUs on nodes ``node_ok`` rules out, held spares among them, are no room.)"""
    bm = fleet.bitmap
    want = sum(ps.count * ps.gpus_per_pod for ps in request.pod_sets)
    platforms = np.array([i for i, _ in candidates], dtype=np.int32)
    allowed = np.ones(fleet.n_nodes, dtype=bool) if node_ok is None else node_ok.astype(bool)
    node_free = np.where(allowed & (bm.node_usable_flags != 0), bm.node_gpu_counts - bm.node_used_gpus, 0)
    free = np.bincount(fleet.node_domain, weights=node_free, minlength=len(bm.domain_platforms)).astype(np.int64)
    room = np.flatnonzero((free >= want) & np.isin(bm.domain_platforms, platforms))
    for d in room[np.lexsort((room, free[room]))]:
        alone = np.ascontiguousarray(allowed & (fleet.node_domain == d), dtype=np.uint8)
        feasible, _ = _plan_on(fleet, request, candidates, alone)
        if feasible:
            return min(feasible, key=lambda kv: kv[0])[1]
    why = f"{request.name}: its pod sets fit no one scale-up domain together"
    return Plan(False, why, request.name, ignored=request.ignored)


def rank_order(fleet: Fleet, nodes: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """``nodes`` (one per pod of a pod set) sorted into rank order.

    The sort key is the node's domain's group path from the top level down
    (``domain_group`` at each level, coarsest first), then the domain's
    index, then the node's index; equal nodes keep their order (a stable
    sort). So each domain gets a consecutive range of ranks, the domains of
    one block are adjacent, and the pods on one node are neighbours. A
    planner answer already in this order comes back unchanged.
    """
    doms = fleet.node_domain[nodes]
    keys = [nodes, doms, *(fleet.domain_group[level, doms] for level in range(fleet.domain_group.shape[0]))]
    return nodes[np.lexsort(keys)]  # lexsort: the last key is the first one sorted by, and it is stable


def _plan_from_nodes(fleet: Fleet, request: GangRequest, platform: Platform, out: np.ndarray) -> Plan:
    out = out.copy()
    pos = 0
    for ps in request.pod_sets:
        out[pos : pos + ps.count] = rank_order(fleet, out[pos : pos + ps.count])
        pos += ps.count
    doms = sorted(set(fleet.node_domain[out].tolist()))
    dom_ids = sorted(fleet.domain_ids[d] for d in doms)
    groups: tuple[str, ...] = ()
    group_level = None
    if fleet.levels.up_keys:
        gids = set(fleet.domain_group[0, doms].tolist())
        groups = tuple(sorted(fleet.group_ids[0][g] for g in gids if g >= 0))
        group_level = fleet.levels.describe(fleet.levels.up_keys[0])
    names = fleet.node_names
    nodes = out.tolist()
    pod_sets = []
    gpus: list[int] = []
    pos = 0
    for ps in request.pod_sets:
        planned = tuple([names[n] for n in nodes[pos : pos + ps.count]])
        pod_sets.append(PlannedPodSet(ps.name, ps.count, ps.gpus_per_pod, planned))
        gpus.extend([ps.gpus_per_pod] * ps.count)
        pos += ps.count
    where = f"{len(dom_ids)} scale-up domain{'s' if len(dom_ids) != 1 else ''}"
    if groups:
        where += f" under {len(groups)} {group_level}{'s' if len(groups) != 1 else ''}"
    reason = f"{len(nodes)} pods, {sum(gpus)} GPUs in {where} of {platform.name}"
    return Plan(
        True,
        reason,
        request.name,
        platform.name,
        tuple(pod_sets),
        tuple(dom_ids),
        groups,
        group_level,
        request.ignored,
        tuple(nodes),
        tuple(gpus),
    )


def place_pods(
    fleet: Fleet,
    platform: int,
    pod_sets: Sequence[tuple[int, int]],
    *,
    required: int = LEVEL_NONE,
    preferred: int = LEVEL_DOMAIN,
    hold_spares: bool = True,
) -> npt.NDArray[np.int32] | None:
    """The nodes ``plan_gang`` would choose for pod sets of (count, GPUs per pod) on one platform, or None.

    The same planner call without names, reasons or node selectors: the
    simulator asks it about every job of a trace, so it skips what only
    people read. Levels are ``LEVEL_NONE``, ``LEVEL_DOMAIN`` or a level above; ``hold_spares`` as
    ``plan_gang``'s.
    """
    ask = gang.PodSets((count, gpus, required, preferred, 1, LEVEL_NONE) for count, gpus in pod_sets)
    answer = gang.plan_gang(fleet.bitmap, ask, platform, spares.usable_mask(fleet, None) if hold_spares else None)
    return answer.nodes if answer.ok else None


def commit(fleet: Fleet, plan: Plan) -> None:
    """Book every pod of a feasible plan on its node (its pods were bound)."""
    if not plan.feasible:
        raise ValueError("cannot commit an infeasible plan")
    for node, g in zip(plan.node_indices, plan.gpus, strict=True):
        fleet.bitmap.allocate(node, g)
