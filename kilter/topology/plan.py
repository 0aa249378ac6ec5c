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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial

import numpy as np
import numpy.typing as npt

from kilter._native import gang
from kilter.model.core_v1 import PodSpec
from kilter.model.errors import InputError, NoGpus
from kilter.model.jobs import PodSetSpec, TopologyRequest
from kilter.topology import cliques, eligibility, pod_gpus, spares
from kilter.topology.catalog import Catalog, Platform
from kilter.topology.cliques import CliqueFacts
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
    "plan_gang",
    "plan_nodes",
    "rank_order",
    "with_clique",
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
    clique: CliqueFacts | None = None  # its ComputeDomain's facts; the planner applies the rule (``with_clique``)
    levels: tuple[int, int] | None = None  # (required, preferred) planner levels of every pod set, for an asker
    # that numbers levels (``LEVEL_NONE``, ``LEVEL_DOMAIN``, above) rather than naming them by label: the simulator

    @cached_property
    def counts(self) -> npt.NDArray[np.int32]:
        """Pods of each pod set, as rank order reads them: made once per request (it is immutable), so an asker of
        many what-ifs with one request pays for them once."""
        return np.array([ps.count for ps in self.pod_sets], dtype=np.int32)

    @cached_property
    def numbered_ask(self) -> gang.PodSets | None:
        """The planner's pod sets with every pod set at ``levels`` (required, preferred; no slices), made once per
        request (None without ``levels``: they are read from each pod set's labels, per platform)."""
        if self.levels is None:
            return None
        required, preferred = self.levels
        if self.one_domain and (required == gang.NONE or required > gang.DOMAIN):
            required, preferred = int(gang.DOMAIN), min(preferred, int(gang.DOMAIN))
        return gang.PodSets((ps.count, ps.gpus_per_pod, required, preferred, 1, int(gang.NONE)) for ps in self.pod_sets)

    @cached_property
    def selective(self) -> bool:
        """Whether a pod set's spec may rule out nodes by labels or taints (else eligibility is not computed)."""
        return any(_narrows(ps.spec) for ps in self.pod_sets)


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
        raise NoGpus(f"{name}: no pod set asks for GPUs ({', '.join(resources)})")
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
    """Plan the gang on the best platform the fleet offers for its device resource: the one door into the planner.

    Every caller plans through here (the servers, ``kilter plan``, the
    AdmissionCheck and the simulator), so every one gets the same rules.
    Nodes are those the pod sets' selectors admit and ``request.node_ok``
    allows; a request carrying ``clique`` facts is first held to its
    ComputeDomain's clique (``with_clique``). A ``one_domain`` request requires one scale-up domain of each pod
    set; when the best plan still puts two pod sets in different domains, each
    domain with room for the whole gang is tried alone, fewest free GPUs first
    (best fit; ties by index), and the first that holds it is the plan.
    ``hold_spares``: keep the fleet's spare nodes (``spares``) out, as every
    new plan does, but those ``request.spares_lent`` (its pods are
    preemptible there); a repair of a running gang may use them.
    """
    request = with_clique(fleet, request)
    found = _decide(fleet, request, hold_spares)
    if isinstance(found, _Placed):
        plan = _plan_from_nodes(fleet, request, fleet.platforms[found.platform], found.nodes)
    else:
        plan = Plan(False, "; ".join(why() for why in found), request.name, ignored=request.ignored)
    return replace(plan, reason=f"{plan.reason} ({request.note})") if request.note else plan


def plan_nodes(fleet: Fleet, request: GangRequest, *, hold_spares: bool = True) -> npt.NDArray[np.int32] | None:
    """The nodes ``plan_gang`` chooses, one per pod in its plan's order (pod set after pod set, each in rank order),
    or None when it finds no plan: the same decision, without the names and reasons only people read, for an asker
    of many what-ifs (the simulator asks about every job of a trace)."""
    found = _decide(fleet, with_clique(fleet, request), hold_spares)
    return found.nodes if isinstance(found, _Placed) else None


def with_clique(fleet: Fleet, request: GangRequest) -> GangRequest:
    """``request`` held to its ComputeDomain's clique and away from the others' (``cliques.constraint``):
    ``one_domain`` unless the domain spans cliques, ``node_ok`` narrowed (one the request has is narrowed further)
    and ``note`` saying so. The facts are consumed (``clique`` becomes None), so applying it twice is applying it
    once; a request without ``clique`` comes back unchanged."""
    if request.clique is None:
        return request
    rule = cliques.constraint(fleet, request.clique)
    ok = rule.node_ok if request.node_ok is None else rule.node_ok & request.node_ok.astype(bool)
    return replace(
        request,
        clique=None,
        one_domain=request.one_domain or rule.one_domain,
        node_ok=np.ascontiguousarray(ok, dtype=np.uint8),
        note=f"{request.note}; {rule.note}" if request.note else rule.note,
    )


Why = Callable[[], str]
"""Why a platform holds no plan, written only when someone reads it."""


@dataclass
class _Placed:
    """The planner's answer on one platform: its nodes in plan order (``_ranked``)."""

    fleet: Fleet
    platform: int
    nodes: npt.NDArray[np.int32]

    def domains(self) -> int:
        return len(np.unique(self.fleet.node_domain[self.nodes]))

    def key(self) -> tuple[int, int, int]:
        """How good the plan is, lower first: (domains, groups of the first level above them, platform)."""
        doms = np.unique(self.fleet.node_domain[self.nodes])
        groups = 0
        if self.fleet.levels.up_keys:
            ids = np.unique(self.fleet.domain_group[0, doms])
            groups = int((ids >= 0).sum())
        return len(doms), groups, self.platform


def _decide(fleet: Fleet, request: GangRequest, hold_spares: bool) -> _Placed | list[Why]:
    """The one decision behind ``plan_gang`` and ``plan_nodes``: the chosen platform's nodes, or why none holds it."""
    wanted = fleet.catalog.get(request.platform).name if request.platform else None
    candidates = [
        (i, p)
        for i, p in enumerate(fleet.platforms)
        if p.device_resource == request.resource and (wanted is None or p.name == wanted)
    ]
    if not candidates:
        return [lambda: f"the fleet has no {wanted or request.resource} nodes"]

    mask = None if request.node_ok is None else request.node_ok.astype(bool)
    if mask is not None and mask.shape != (fleet.n_nodes,):
        raise ValueError(f"node_ok has {mask.shape[0]} nodes, the fleet {fleet.n_nodes}")
    for ps in request.pod_sets if request.selective else ():
        m = eligibility.node_mask(fleet, ps.spec, path=f"pod set {ps.name}: spec") if _narrows(ps.spec) else None
        if m is not None:
            mask = m if mask is None else (mask & m)
    node_ok = None if mask is None else np.ascontiguousarray(mask, dtype=np.uint8)
    if hold_spares:
        node_ok = spares.usable_mask(fleet, node_ok, lent=request.spares_lent)
    placed, whys = _place_on(fleet, request, candidates, node_ok)
    if len(placed) == 1 and not request.one_domain:
        return placed[0]
    together = [p for p in placed if not request.one_domain or p.domains() <= 1]
    if together:
        return min(together, key=_Placed.key)
    if placed:
        return _in_one_domain(fleet, request, candidates, node_ok)
    held = spares.note(fleet, lent=request.spares_lent) if hold_spares else ""
    return [*whys, *([partial(str, held)] if held else [])]


def _place_on(
    fleet: Fleet, request: GangRequest, candidates: Sequence[tuple[int, Platform]], node_ok: np.ndarray | None
) -> tuple[list[_Placed], list[Why]]:
    """Each candidate platform's answer, and why the others hold none."""
    counts = request.counts
    placed: list[_Placed] = []
    whys: list[Why] = []
    for index, platform in candidates:
        ask = request.numbered_ask
        if ask is None:
            levels, problem = _levels(fleet, request, platform)
            if problem:
                whys.append(partial(str, problem))
                continue
            ask = gang.PodSets(
                (ps.count, ps.gpus_per_pod, *lv) for ps, lv in zip(request.pod_sets, levels, strict=True)
            )
        answer = _native_plan(fleet, ask, index, node_ok)
        if not answer.ok:
            whys.append(partial(_failure, fleet, request, platform, answer))
            continue
        placed.append(_Placed(fleet, index, _ranked(fleet, counts, answer.nodes)))
    return placed, whys


def _native_plan(
    fleet: Fleet, ask: gang.PodSets, platform: int, node_ok: npt.NDArray[np.uint8] | None
) -> gang.PlanResult:
    """The planner's answer for ``ask`` on one platform: the one call into it."""
    return gang.plan_gang(fleet.bitmap, ask, platform, node_ok)


def _narrows(spec: PodSpec) -> bool:
    """Whether ``spec`` may rule out nodes by their labels or taints at all: a spec with no selector, no affinity
    and a toleration of every taint (the simulator's pods) admits every node, and is not read again."""
    tolerates_all = any(t.operator == "Exists" and not t.key and not t.effect for t in spec.tolerations)
    return bool(spec.node_selector) or spec.affinity is not None or not tolerates_all


def _in_one_domain(
    fleet: Fleet, request: GangRequest, candidates: Sequence[tuple[int, Platform]], node_ok: np.ndarray | None
) -> _Placed | list[Why]:
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
        placed, _ = _place_on(fleet, request, candidates, alone)
        if placed:
            return min(placed, key=_Placed.key)
    return [lambda: f"{request.name}: its pod sets fit no one scale-up domain together"]


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
    if len(doms) and (doms == doms[0]).all():
        return np.sort(nodes, kind="stable")  # one domain: its nodes by index (the common answer, sorted faster)
    keys = [nodes, doms, *(fleet.domain_group[level, doms] for level in range(fleet.domain_group.shape[0]))]
    return nodes[np.lexsort(keys)]  # lexsort: the last key is the first one sorted by, and it is stable


def _ranked(fleet: Fleet, counts: npt.NDArray[np.int32], out: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """The planner's answer with each pod set's nodes in rank order (``rank_order``), pod sets kept in order: one
    sort with the pod set as its first key."""
    if len(out) <= 1:
        return out
    if len(counts) == 1:
        return rank_order(fleet, out)
    doms = fleet.node_domain[out]
    groups = (fleet.domain_group[level, doms] for level in range(fleet.domain_group.shape[0]))
    pod_set = np.repeat(np.arange(len(counts)), counts)
    return out[np.lexsort([out, doms, *groups, pod_set])]


def _plan_from_nodes(fleet: Fleet, request: GangRequest, platform: Platform, out: np.ndarray) -> Plan:
    """The plan of the planner's answer ``out``, already in plan order (``_ranked``)."""
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


def commit(fleet: Fleet, plan: Plan) -> None:
    """Book every pod of a feasible plan on its node (its pods were bound)."""
    if not plan.feasible:
        raise ValueError("cannot commit an infeasible plan")
    for node, g in zip(plan.node_indices, plan.gpus, strict=True):
        fleet.bitmap.allocate(node, g)
