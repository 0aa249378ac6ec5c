"""Kueue Topology-Aware Scheduling as a simulator baseline: BestFit, slices, multi-layer slices, balanced placement.

Follows ``pkg/cache/scheduler/tas_flavor_snapshot.go`` and
``tas_balanced_placement.go`` of kubernetes-sigs/kueue at ff69552e
(v0.20.0-devel), read as the algorithm and re-expressed over arrays. One
PodSet is placed by ``findTopologyAssignment`` in three phases:

* Phase 1, ``fillInCounts``: a leaf (node) holds ``floor(free / gpus)`` pods,
  a domain the sum over its children. With slices of ``s`` pods required at
  a level, a domain of that level holds ``pods // s`` slices, one above it the
  sum of its children's, one below it none. Multi-layer constraints
  (``buildSliceSizeAtLevel``) round each child's pods down to a multiple of
  the inner size before they are summed into its parent, at every level down
  to the inner layer's.
* Phase 2a, ``findLevelWithFitDomains`` at the requested level. Domains sort
  by slices descending, then pods *ascending* (the least leftover), then level
  values (``sortedDomains``); BestFit takes the first of the fewest slices
  that hold all (``findBestFitDomainForSlices``). When none does, ``required``
  fails and ``preferred`` asks one level up; at the top level it takes
  domains greedily and best-fits the last one.
* Phase 2b, ``updateCountsToMinimumGeneric`` on the way down. Above the slice
  level the children of *all* chosen domains are pooled, sorted the same way
  and taken greedily in slices, the last best-fitted: the parents' split is
  not kept. At and below the slice level each chosen domain's pods go to its
  own children, which sort by pods ascending (their slice count is zero), in
  units of the inner slice size where a layer asks one, else of pods.

Without slices the slice level is the node and the slice one pod, so all of
phase 2b is the pooled descent. ``unconstrained`` asks the node level with
LeastFreeCapacity: the least-free node that holds every pod, else nodes in
ascending order, each filled; with slices it is Kueue's slice-only request,
LeastFreeCapacity from the top level down. Gate ``TASBalancedPlacement`` (off
by default, ``balanced=True`` here) first tries, for a preferred request,
``findBestDomainsForBalancedPlacement``: under each domain one level above the
requested one, greedily count the domains one level down (or at the slice
level, when that is the requested one) that hold the slices, take the
threshold ``min(slices // used, slices of the last used)``, prune domains
below it and keep the group of the highest threshold, then of the fewest
requested-level domains. ``applyBalancedPlacementAlgorithm`` picks a set of
domains by a subset-sum over pods (``selectOptimalDomainSetToFit``; at the
requested level in capacity-then-entropy order) and gives each chosen domain
the threshold plus extras in sorted order (``placeSlicesOnDomainsBalanced``);
phase 2b then goes down per domain in the pruned counts. Any failure falls
back to BestFit on the unpruned counts, as upstream does.

Upstream behaviour kept as is: pruning clears a requested-level domain's
children whose slice count is below the threshold, and below the slice level
that count is zero, so when the request and slice levels coincide above the
node (``kueue-tas``'s recipe: preferred rack with rack slices) balanced
placement never applies and BestFit decides. Pruning recounts without the
multi-layer rounding; entropy is summed child by child as Go does.

Requests Kueue refuses return None: a level the tree lacks, slices above the
requested level, inner layers not strictly finer or not dividing the outer
size, more than three layers. A pod count the outer slice size does not
divide also returns None; Kueue at ff69552e does not refuse it (only a size
above the count) but floors the slice count and assigns fewer pods than
asked, which the simulator cannot run.

Simplifications: GPUs are the only resource; there are no leaders (LWS
leader pod sets, ``leaderCount`` 0 everywhere), so the leader paths of these
functions are left out, and no node affinity. Kueue leaves a node without
every level label out of its tree, so detached nodes (clique label lost) and
domains without a group label are never used. Pod sets are placed one after
the other as the PodSets of one Workload are
(``FindTopologyAssignmentsForFlavor``): each on its own, earlier ones' usage
booked first; slices apply to the first, whole-node pod set only. Levels,
coarsest first: the fleet's groups (spine, block), the scale-up domain, the
node; ties fall to level values (group path, clique id, hostname), which is
group order, then the fleet's node index. A gang's ``level`` and its slices'
levels count up from the scale-up domain (0) as ``gangs.Gang`` says.

The tree and phase 1 are ``kueue_tas_tree``'s, the balanced gate
``kueue_tas_balanced``'s; phase 2 (BestFit and the descent) and the policy are
here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from kilter.sim.gangs import Gang, Slices, TopologyMode
from kilter.sim.kueue_tas_balanced import balanced_start
from kilter.sim.kueue_tas_tree import (
    Counts,
    Ints,
    TasRequest,
    TasTree,
    build_tree,
    children_of,
    fill_counts,
    labelled_domains,
    resolve_request,
    sorted_domains,
)
from kilter.sim.placement import Nodes, PerPlatform, free_gpus
from kilter.topology import tas_recipe
from kilter.topology.fleet import Fleet

__all__ = ["KueueTas", "labelled_domains"]

_NEVER = np.iinfo(np.int64).max


def _take_best_fit(cand: Ints, caps: Ints, *, count: int, best_fit: bool = True) -> tuple[Ints, Ints] | None:
    """``updateCountsToMinimumGeneric`` over candidates in their sort order: ids and units (slices) taken.

    Takes whole domains in order until one holds the rest. BestFit (``caps``
    descending, as ``sortedDomains`` leaves them) swaps that last one for the
    one of least capacity further on that still holds the rest
    (``findBestFitDomainForSlices``: the first of that capacity in the order).
    Domains given nothing are left out; None when all together are short.
    """
    total = np.cumsum(caps)
    if not len(caps) or total[-1] < count:
        return None
    i = int(np.searchsorted(total, count))
    rest = count - int(total[i] - caps[i])
    ids, units = cand[: i + 1].copy(), caps[: i + 1].copy()
    units[i] = rest
    if best_fit:
        tail = -caps[i:]  # ascending
        smallest_fit = tail[int(np.searchsorted(tail, -rest, side="right")) - 1]
        ids[i] = cand[i + int(np.searchsorted(tail, smallest_fit))]
        return ids, units  # descending capacities: nothing before the last is empty
    keep = units > 0
    return ids[keep], units[keep]


def _take_at_level(counts: Counts, level: int, *, need: int, least_free: bool) -> tuple[Ints, Ints] | None:
    """``findLevelWithFitDomains`` at the level it settled on: BestFit's fitting domain of fewest slices (or, at
    the top level, greedy with the last best-fitted); LeastFreeCapacity's first fitting domain in ascending order,
    else greedy from the least free."""
    cand, caps = sorted_domains(np.arange(len(counts.slices[level])), counts, level, least_free=least_free)
    if least_free:
        first = int(np.searchsorted(caps, need))
        if first < len(caps):
            return cand[first : first + 1], np.array([need], dtype=np.int64)
    return _take_best_fit(cand, caps, count=need, best_fit=not least_free)


def _least_free_capacity(caps: Ints, *, count: int) -> tuple[Ints, Ints] | None:
    """LeastFreeCapacity at the leaf level: the least-free node that holds all, else fill nodes from the least free."""
    order = np.argsort(caps, kind="stable")
    ordered = caps[order]
    first_fit = int(np.searchsorted(ordered, count))
    if first_fit < len(ordered):
        return order[first_fit : first_fit + 1], np.array([count], dtype=np.int64)
    total = np.cumsum(ordered)
    if not len(total) or total[-1] < count:
        return None
    i = int(np.searchsorted(total, count))
    counts = ordered[: i + 1].copy()
    counts[i] = count - (total[i] - ordered[i])
    keep = counts > 0
    return order[: i + 1][keep], counts[keep]


def _take_per_parent(caps: Ints, starts: Ints, needs: Ints, *, best_fit: bool) -> Ints | None:
    """``_take_best_fit`` for every parent at once over its own children: ``caps`` in each parent's sort order,
    parent runs from ``starts``, ``needs`` units each; returns the units taken per child (None: a parent is short).

    The chosen child of each run is found with one ``minimum.reduceat`` over
    ``capacity * (n + 1) + position`` among those that hold the rest: the
    least capacity, then the first in the order.
    """
    n = len(caps)
    total = np.cumsum(caps)
    ends = np.append(starts[1:], n)
    before = total[starts] - caps[starts]
    if (total[ends - 1] - before < needs).any():
        return None
    last = np.maximum(np.searchsorted(total, before + needs), starts)
    rest = before + needs - (total[last] - caps[last])
    run = np.repeat(np.arange(len(starts)), ends - starts)
    pos = np.arange(n)
    taken = np.where(pos < last[run], caps, 0)
    pick = last
    if best_fit:
        fits = (pos >= last[run]) & (caps >= rest[run])
        pick = np.minimum.reduceat(np.where(fits, caps * (n + 1) + pos, _NEVER), starts) % (n + 1)
    taken[pick] = rest
    return taken


def _best_fit_levels(tree: TasTree, counts: Counts, req: TasRequest) -> tuple[int, Ints, Ints] | None:
    """Phase 2a and phase 2b above the slice level: the slice level's chosen domains (or the leaves, without slices)
    and their pods; None where Kueue reports no fit."""
    need = req.count // req.slice_size
    level = req.level
    if not req.unconstrained:
        while level > 0 and not req.required and counts.slices[level].max() < need:
            level -= 1  # findLevelWithFitDomains: no domain holds the slices, ask one level up
        if req.required and counts.slices[level].max() < need:
            return None
    chosen = _take_at_level(counts, level, need=need, least_free=req.unconstrained)
    while chosen is not None and level < req.slice_level:  # descend, children of all chosen domains pooled
        children, _ = children_of(tree, level, np.sort(chosen[0]))
        level += 1
        cand, caps = sorted_domains(children, counts, level, least_free=req.unconstrained)
        chosen = _take_best_fit(cand, caps, count=need, best_fit=not req.unconstrained)
    if chosen is None:
        return None
    return level, chosen[0], chosen[1] * req.slice_size


def _distribute(
    tree: TasTree, counts: Counts, req: TasRequest, level: int, ids: Ints, pods: Ints
) -> tuple[Ints, Ints] | None:
    """Phase 2b from ``level`` down: each chosen domain's pods go to its own children, in units of the slice size
    above the slice level (balanced placement only), of the inner layer's below it, else of pods."""
    last = len(tree.starts) - 1
    least_free = req.unconstrained
    while level < last:
        order = np.argsort(ids)
        ids, pods = ids[order], pods[order]
        children, starts = children_of(tree, level, ids)
        size = req.slice_size if level < req.slice_level else req.inner[level + 1]
        level += 1
        run = np.repeat(np.arange(len(ids)), np.diff(np.append(starts, len(children))))
        child_pods, slices = counts.pods[level][children], counts.slices[level][children]
        order = np.lexsort((children, child_pods, slices if least_free else -slices, run))
        children, child_pods = children[order], child_pods[order]
        units, needs = (child_pods // size, pods // size) if size > 1 else (child_pods, pods)
        taken = _take_per_parent(units, starts, needs, best_fit=not least_free)
        if taken is None:
            return None
        keep = taken > 0
        ids, pods = children[keep], taken[keep] * size
    return ids, pods


def _place_pod_set(
    tree: TasTree,
    free: Ints,
    *,
    count: int,
    gpus: int,
    mode: TopologyMode,
    level: int = 0,
    slices: Slices = (),
    balanced: bool = False,
) -> tuple[Ints, Ints] | None:
    """Leaves and pods per leaf for one pod set (``findTopologyAssignment``), or None where Kueue reports no fit
    or refuses the request; ``balanced``: the ``TASBalancedPlacement`` gate is on."""
    if not len(tree.leaves):
        return None
    req = resolve_request(tree, count=count, mode=mode, level=level, slices=slices)
    if req is None:
        return None
    leaf_pods = free[tree.leaves] // gpus
    if req.unconstrained and req.level == len(tree.starts) - 1:
        return _least_free_capacity(leaf_pods, count=count)
    counts = fill_counts(tree, leaf_pods, req)
    start = None
    if balanced and not req.required and not req.unconstrained:
        start = balanced_start(tree, leaf_pods, counts, req)
    if start is None:
        found = _best_fit_levels(tree, counts, req)
        if found is None:
            return None
        start = (*found, counts)
    fit_level, ids, pods, used = start
    return _distribute(tree, used, req, fit_level, ids, pods)


class KueueTas:
    """Kueue TAS's placement (v0.15+ defaults), asked for the gang's request at its level.

    ``recommended``: each job asks as Kueue's docs recommend for rack-scale
    NVLink (``topology.tas_recipe``: required at the domain level for a gang
    one domain holds, else required domain slices, and block slices beyond a
    block, with the whole set preferred one level up, at the block, as kilter's
    webhook writes it: for a gang no rack holds, BestFit climbs from the rack
    to the block anyway, so this places as preferred-at-the-rack does, and it
    is the request ``TASBalancedPlacement`` can act on, the slice level being
    below it); without it every job asks preferred at the domain level, no
    slices (the setup ``kueue-tas-preferred`` keeps). ``waits``: kilter's AdmissionCheck stands
    in front, and its split-wait rule may hold a preferred gang back.
    ``balanced``: the ``TASBalancedPlacement`` gate is on (off by default in
    Kueue), so a preferred request is spread evenly when it can be.
    """

    def __init__(
        self, *, name: str = "kueue-tas", recommended: bool = True, waits: bool = False, balanced: bool = False
    ) -> None:
        self.name = name
        self.recommended = recommended
        self.waits_for_fewer_domains = waits
        self.balanced = balanced
        self._trees = PerPlatform(build_tree)

    def ask(self, fleet: Fleet, gang: Gang) -> Gang:
        """The gang as its job would be submitted (``placement.Asking``); slices split its whole-node pod set."""
        if not self.recommended:
            return dataclasses.replace(gang, topology="preferred", level=0, slices=())
        count, gpus = gang.pod_sets[0]
        asked = tas_recipe.recipe(fleet, gang.platform, count, gpus)
        if asked is None:
            return dataclasses.replace(gang, topology="preferred", level=0, slices=())
        if asked.required_domain:
            return dataclasses.replace(gang, topology="required", level=0, slices=())
        slices: Slices = ((0, asked.slice_size),) if asked.slice_size > 1 else ()
        if asked.block_slice_size:
            slices = ((1, asked.block_slice_size), *slices)
        level = 1 if fleet.domain_group.shape[0] else 0  # the block, where the fleet has one
        return dataclasses.replace(gang, topology="preferred", level=level, slices=slices)

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        """One node per pod, pod sets in order; the gang's level, its slices (first pod set only) and the gate."""
        tree = self._trees.of(fleet, gang.platform)
        free = free_gpus(fleet).astype(np.int64)
        out: list[npt.NDArray[np.int32]] = []
        for i, (count, gpus) in enumerate(gang.pod_sets):
            if count <= 0:
                continue
            chosen = _place_pod_set(
                tree,
                free,
                count=count,
                gpus=gpus,
                mode=gang.topology,
                level=gang.level,
                slices=gang.slices if i == 0 else (),
                balanced=self.balanced,
            )
            if chosen is None:
                return None
            leaves, pods = chosen
            order = np.argsort(leaves)  # buildAssignment lists domains in level-value order
            nodes = tree.leaves[leaves[order]]
            free[nodes] -= pods[order] * gpus
            out.append(np.repeat(nodes, pods[order]))
        return np.concatenate(out).astype(np.int32) if out else np.zeros(0, dtype=np.int32)
