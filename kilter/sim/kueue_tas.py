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

The module runs past 500 lines because the two upstream files share the
count arrays and tree built here; splitting them would export private state.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from kilter.sim.gangs import Gang, Slices, TopologyMode
from kilter.sim.placement import Nodes, PerPlatform, free_gpus
from kilter.topology import tas_recipe
from kilter.topology.fleet import Fleet

__all__ = ["KueueTas", "labelled_domains"]

Ints = npt.NDArray[np.int64]
_NEVER = np.iinfo(np.int64).max
_MAX_LAYERS = 3  # the webhook's limit on podset-slice-required-topology-constraints


@dataclass(frozen=True, slots=True)
class _Tree:
    """Kueue's topology tree over one platform's nodes, as arrays; levels coarsest first, the node level last.

    Leaves are in level-value order, and the domains of every level are
    numbered in that order, so a smaller id is an earlier level value: the tie
    key of every sort. A domain's children are consecutive ids one level down.
    """

    leaves: npt.NDArray[np.int32]  # fleet node index of each leaf
    starts: tuple[Ints, ...]  # per level: first leaf of each domain
    parent: tuple[Ints, ...]  # per level: each domain's parent id one level up (level 0: all 0)
    first_child: tuple[Ints, ...]  # per level but the last: first child of each domain, then the child count
    n_leaves: tuple[Ints, ...]  # per level: leaves under each domain

    @property
    def domain_level(self) -> int:
        return len(self.starts) - 2


class _Counts(NamedTuple):
    """Phase 1's per-level capacities: pods each domain holds and slices it holds (``slices[l] is pods[l]`` when
    the request asks no slices)."""

    pods: list[Ints]
    slices: list[Ints]


@dataclass(frozen=True, slots=True)
class _Request:
    """One pod set's request in the tree's level indices (0 = coarsest, the last = node), validated as Kueue does.

    ``inner[l]``: the pods of a level-``l`` domain count in multiples of this
    when summed into its parent and when its parent's pods are split among
    its level (``sliceSizeAtLevel``; 1 = no inner layer there).
    """

    count: int
    level: int
    slice_level: int
    slice_size: int
    inner: tuple[int, ...]
    required: bool
    unconstrained: bool


def labelled_domains(fleet: Fleet) -> npt.NDArray[np.bool_]:
    """Per domain: its node carries the scale-up-domain label (false for a tray whose clique label is gone).

    Kueue and Volcano see labels, not kilter's domain flags: a node without
    the label is in no Kueue topology tree and no tier-1 HyperNode. The rule
    is ``build_fleet``'s, which makes such a node a detached one-node domain.
    """
    start = fleet.bitmap.domain_node_start
    out = np.ones(fleet.bitmap.n_domains, dtype=bool)
    for d, p in enumerate(fleet.bitmap.domain_platforms.tolist()):
        platform = fleet.platforms[p]
        labels = fleet.node_labels[int(start[d])]
        out[d] = not platform.is_multi_node or fleet.levels.domain_label(platform, labels) is not None
    return out


def _build_tree(fleet: Fleet, platform: int) -> _Tree:
    bm = fleet.bitmap
    node_domain = np.asarray(fleet.node_domain, dtype=np.int64)
    groups = np.asarray(fleet.domain_group)[::-1]  # coarsest level first
    in_tree = (bm.domain_platforms == platform) & labelled_domains(fleet)
    in_tree &= (groups >= 0).all(axis=0)
    nodes = np.flatnonzero(in_tree[node_domain])
    # Level values per leaf, coarsest first: group ids (sorted paths), domain id, hostname (index order).
    keys = [g[node_domain[nodes]] for g in groups] + [node_domain[nodes], nodes]
    order = np.lexsort(keys[::-1])
    nodes = nodes[order]
    changed = np.zeros(max(len(nodes) - 1, 0), dtype=bool)
    above = np.zeros(len(nodes), dtype=np.int64)  # each leaf's domain id one level up
    starts: list[Ints] = []
    parent: list[Ints] = []
    for key in keys:
        ordered = key[order]
        changed |= ordered[1:] != ordered[:-1]
        first = np.flatnonzero(np.concatenate(([len(nodes) > 0], changed)))
        parent.append(above[first])
        starts.append(first)
        above = np.cumsum(np.concatenate(([0], changed)), dtype=np.int64)
    first_child = tuple(
        np.searchsorted(parent[lv + 1], np.arange(len(starts[lv]) + 1)).astype(np.int64)
        for lv in range(len(starts) - 1)
    )
    n_leaves = tuple(np.diff(np.append(first, len(nodes))) for first in starts)
    return _Tree(nodes.astype(np.int32), tuple(starts), tuple(parent), first_child, n_leaves)


def _request(tree: _Tree, *, count: int, mode: TopologyMode, level: int, slices: Slices) -> _Request | None:
    """The pod set's request as ``findTopologyAssignment`` resolves it, or None where Kueue refuses it.

    ``unconstrained`` asks the node level; with slices it is the slice-only
    request, which asks the top level (``levelKey``, ``isUnconstrained``).
    """
    n_levels = len(tree.starts)
    top = tree.domain_level
    if mode == "unconstrained":
        requested = 0 if slices else n_levels - 1
    elif 0 <= level <= top:
        requested = top - level
    else:
        return None
    inner = [1] * n_levels
    asked = functools.partial(
        _Request, count, requested, required=mode == "required", unconstrained=mode == "unconstrained"
    )
    if not slices:
        return asked(n_levels - 1, 1, tuple(inner))
    if len(slices) > _MAX_LAYERS or any(not 0 <= lv <= top or size < 1 for lv, size in slices):
        return None
    slice_level, slice_size = top - slices[0][0], slices[0][1]
    if requested > slice_level or count % slice_size:
        return None
    prev_level, prev_size = slice_level, slice_size
    for lv, size in slices[1:]:  # buildSliceSizeAtLevel: each layer finer, dividing the one above
        at = top - lv
        if at <= prev_level or prev_size % size:
            return None
        inner[prev_level + 1 : at + 1] = [size] * (at - prev_level)
        prev_level, prev_size = at, size
    return asked(slice_level, slice_size, tuple(inner))


def _ranges(tree: _Tree, *, top: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """The ids of the subtree under level-``top`` domains ``lo``..``hi - 1``: (first, end) per level from ``top``."""
    out = [(lo, hi)]
    for lv in range(top, len(tree.starts) - 1):
        first, end = out[-1]
        out.append((int(tree.first_child[lv][first]), int(tree.first_child[lv][end])))
    return out


def _subtree_counts(
    tree: _Tree, leaf_pods: Ints, req: _Request, ranges: list[tuple[int, int]], *, rounded: bool
) -> _Counts:
    """``fillInCountsHelper`` over the subtree ``ranges`` spans (its leaves' pods given): pods and slices for its
    levels, the top one first, in ids counted from the subtree's first at each level.

    Below the slice level a domain holds no slices; at it ``pods // size``;
    above it the sum of its children's. ``rounded``: apply the multi-layer
    rounding (phase 1 does; the balanced pruning's recount does not).
    """
    n_levels = len(tree.starts)
    top = n_levels - len(ranges)
    pods: list[Ints] = [leaf_pods]
    for lv in range(n_levels - 2, top - 1, -1):
        child = pods[0]
        size = req.inner[lv + 1]
        if rounded and size > 1:
            child = child // size * size
        (first, end), (child_first, _) = ranges[lv - top], ranges[lv - top + 1]
        bounds = tree.first_child[lv][first:end]
        pods.insert(0, np.add.reduceat(child, bounds - child_first if child_first else bounds))
    if req.slice_level == n_levels - 1 and req.slice_size == 1:
        return _Counts(pods, pods)
    slices = [np.zeros_like(p) for p in pods]
    at = req.slice_level - top
    slices[at] = pods[at] // req.slice_size
    for k in range(at - 1, -1, -1):
        (first, end), (child_first, _) = ranges[k], ranges[k + 1]
        slices[k] = np.add.reduceat(slices[k + 1], tree.first_child[k + top][first:end] - child_first)
    return _Counts(pods, slices)


def _fill_counts(tree: _Tree, leaf_pods: Ints, req: _Request) -> _Counts:
    """Phase 1 (``fillInCounts``) over the whole tree."""
    return _subtree_counts(tree, leaf_pods, req, [(0, len(s)) for s in tree.starts], rounded=True)


def _sorted(ids: Ints, counts: _Counts, level: int, *, least_free: bool) -> tuple[Ints, Ints]:
    """``sortedDomains`` of ascending ``ids``: slices descending (LeastFreeCapacity: ascending), then pods
    ascending, then level values; returns the ids and their slices in that order."""
    slices = counts.slices[level][ids]
    key = slices if least_free else -slices
    if counts.slices[level] is counts.pods[level]:
        order = np.argsort(key, kind="stable")
    else:
        order = np.lexsort((ids, counts.pods[level][ids], key))
    return ids[order], slices[order]


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


def _take_at_level(counts: _Counts, level: int, *, need: int, least_free: bool) -> tuple[Ints, Ints] | None:
    """``findLevelWithFitDomains`` at the level it settled on: BestFit's fitting domain of fewest slices (or, at
    the top level, greedy with the last best-fitted); LeastFreeCapacity's first fitting domain in ascending order,
    else greedy from the least free."""
    cand, caps = _sorted(np.arange(len(counts.slices[level])), counts, level, least_free=least_free)
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


def _children(tree: _Tree, level: int, parents: Ints) -> tuple[Ints, Ints]:
    """The children (one level down) of ``parents`` (ascending ids), ascending, and where each parent's run starts."""
    fc = tree.first_child[level]
    if len(parents) == 1:
        p = int(parents[0])
        return np.arange(fc[p], fc[p + 1], dtype=np.int64), np.zeros(1, dtype=np.int64)
    first = fc[parents]
    lens = fc[parents + 1] - first
    starts = np.zeros(len(parents), dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    return np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(first - starts, lens), starts


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


def _best_fit_levels(tree: _Tree, counts: _Counts, req: _Request) -> tuple[int, Ints, Ints] | None:
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
        children, _ = _children(tree, level, np.sort(chosen[0]))
        level += 1
        cand, caps = _sorted(children, counts, level, least_free=req.unconstrained)
        chosen = _take_best_fit(cand, caps, count=need, best_fit=not req.unconstrained)
    if chosen is None:
        return None
    return level, chosen[0], chosen[1] * req.slice_size


def _distribute(
    tree: _Tree, counts: _Counts, req: _Request, level: int, ids: Ints, pods: Ints
) -> tuple[Ints, Ints] | None:
    """Phase 2b from ``level`` down: each chosen domain's pods go to its own children, in units of the slice size
    above the slice level (balanced placement only), of the inner layer's below it, else of pods."""
    last = len(tree.starts) - 1
    least_free = req.unconstrained
    while level < last:
        order = np.argsort(ids)
        ids, pods = ids[order], pods[order]
        children, starts = _children(tree, level, ids)
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


# --- TASBalancedPlacement (tas_balanced_placement.go), without leaders ---


def _greedy_count(slices: Ints, need: int) -> tuple[int, int] | None:
    """``evaluateGreedyAssignment``: how many domains, most slices first, hold ``need`` slices, and the slices of
    the last one taken; None when all together hold fewer."""
    most = int(slices.max(initial=0))
    if most >= need:
        return 1, most
    ordered = np.sort(slices)[::-1]
    total = np.cumsum(ordered)
    if not len(total) or total[-1] < need:
        return None
    i = int(np.searchsorted(total, need))
    return i + 1, int(ordered[i])


def _pruned(
    tree: _Tree, leaf_pods: Ints, counts: _Counts, req: _Request, ranges: list[tuple[int, int]], *, threshold: int
) -> _Counts:
    """``pruneDomainsBelowThreshold`` on the requested-level domains ``ranges[0]``: the subtree's counts (as
    ``_subtree_counts`` lists them) after pruning; phase 1's counts stay as they are for the BestFit fallback.

    Children holding fewer slices than the threshold (by phase 1's counts)
    are emptied, the domains recounted without multi-layer rounding, and the
    domains then below the threshold emptied too.
    """
    top = req.level
    (lo, hi), (child_first, child_end), (leaf_first, leaf_end) = ranges[0], ranges[1], ranges[-1]
    leaves = leaf_pods[leaf_first:leaf_end].copy()
    cut = counts.slices[top + 1][child_first:child_end] < threshold
    if cut.any():
        leaves[np.repeat(cut, tree.n_leaves[top + 1][child_first:child_end])] = 0
    sub = _subtree_counts(tree, leaves, req, ranges, rounded=False)
    cut = sub.slices[0] < threshold
    if cut.any():
        leaves[np.repeat(cut, tree.n_leaves[top][lo:hi])] = 0
        sub = _subtree_counts(tree, leaves, req, ranges, rounded=False)
    return sub


def _spliced(counts: _Counts, sub: _Counts, ranges: list[tuple[int, int]]) -> _Counts:
    """Phase 1's counts with the subtree ``ranges`` spans replaced by ``sub`` (a copy: upstream prunes clones)."""
    pods, slices = list(counts.pods), list(counts.slices)
    top = len(counts.pods) - len(ranges)
    for k, (first, end) in enumerate(ranges):
        pods[top + k] = counts.pods[top + k].copy()
        pods[top + k][first:end] = sub.pods[k]
        if sub.slices[k] is sub.pods[k]:
            slices[top + k] = pods[top + k]
        else:
            slices[top + k] = counts.slices[top + k].copy()
            slices[top + k][first:end] = sub.slices[k]
    return _Counts(pods, slices)


def _entropy(pods: Ints) -> float:
    """``calculateDomainsEntropy``: Shannon entropy (bits) of how a domain's pods spread over its children.

    Summed child by child in order as Go does, so equal spreads tie exactly;
    two entropies a last bit apart (C's ``log2`` is not Go's ``math.Log2``)
    may order differently from Kueue, which only the tie-break can notice.
    """
    total = int(pods.sum())
    if total == 0:
        return 0.0
    entropy = 0.0
    for count in pods.tolist():
        if count > 0:
            share = count / total
            entropy += -share * math.log2(share)
    return entropy


def _select_optimal(
    tree: _Tree, counts: _Counts, level: int, ids: Ints, *, need: int, size: int, by_entropy: bool
) -> Ints | None:
    """``selectOptimalDomainSetToFit``: as many domains as the greedy count needs, holding the fewest pods that
    still reach ``need * size``; None when there is no such set.

    A subset-sum over pods in level-value order (``by_entropy``: slices
    descending, then the more even spread over children, then level values);
    each (domains used, pods left) state keeps the first set that reached it,
    and a set that already reached the pods is not extended.
    """
    slices = counts.slices[level][ids]
    greedy = _greedy_count(slices, need)
    if greedy is None:
        return None
    n_best = greedy[0]
    pods = counts.pods[level][ids].tolist()
    if by_entropy:
        fc = tree.first_child[level]
        spread = np.array([_entropy(counts.pods[level + 1][fc[d] : fc[d + 1]]) for d in ids.tolist()])
        order = np.lexsort((ids, -spread, -slices)).tolist()
    else:
        order = np.argsort(ids, kind="stable").tolist()
    reach: list[dict[int, tuple[int, int]]] = [{} for _ in range(n_best + 1)]
    reach[0][need * size] = (-1, 0)
    for k in order:
        if slices[k] <= 0:
            continue
        for used in range(n_best, 0, -1):
            here = reach[used]
            for left in reach[used - 1]:
                if left > 0 and left - pods[k] not in here:
                    here[left - pods[k]] = (k, left)
    done = [left for left in reach[n_best] if left <= 0]
    if not done:
        return None
    left = max(done)
    picked = []
    for used in range(n_best, 0, -1):
        k, left = reach[used][left]
        picked.append(int(ids[k]))
    return np.array(picked, dtype=np.int64)


def _apply_balanced(
    tree: _Tree, counts: _Counts, req: _Request, *, lo: int, hi: int, threshold: int
) -> tuple[int, Ints, Ints] | None:
    """``applyBalancedPlacementAlgorithm`` with ``placeSlicesOnDomainsBalanced``: the domains the descent starts
    from (one level below the requested one unless that is the slice level) and their pods; None to fall back.

    Every chosen domain gets ``threshold`` slices; the extra ones go to them in
    sorted order, each up to its capacity.
    """
    need, size, top = req.count // req.slice_size, req.slice_size, req.level
    fit_level, fit = top, np.arange(lo, hi, dtype=np.int64)
    if top < req.slice_level:
        chosen = _select_optimal(tree, counts, top, fit, need=need, size=size, by_entropy=True)
        if chosen is None:
            return None
        fit_level, (fit, _) = top + 1, _children(tree, top, np.sort(chosen))
    chosen = _select_optimal(tree, counts, fit_level, fit, need=need, size=size, by_entropy=False)
    if chosen is None or need < len(chosen) * threshold:
        return None
    ids, slices = _sorted(np.sort(chosen), counts, fit_level, least_free=False)
    taken = np.full(len(ids), threshold, dtype=np.int64)
    extra = need - len(ids) * threshold
    for k, held in enumerate(slices.tolist()):
        if extra > 0:
            more = min(held - threshold, extra)
            taken[k] += more
            extra -= more
    if extra > 0:
        return None
    return fit_level, ids, taken * size


def _balanced(tree: _Tree, leaf_pods: Ints, counts: _Counts, req: _Request) -> tuple[int, Ints, Ints, _Counts] | None:
    """``findBestDomainsForBalancedPlacement`` then ``applyBalancedPlacementAlgorithm``: where the descent starts
    and the pruned counts it reads, or None for the BestFit fallback.

    Groups are the children of each domain one level above the requested one
    (all top-level domains when the top is requested), in level-value order.
    When the requested level is the slice level, every child holds no slices
    (it is below the slice level) and the threshold is at least 1, so pruning
    empties every domain and no group fits: that is decided without pruning.
    """
    need, top = req.count // req.slice_size, req.level
    if top == req.slice_level:
        return None
    if top == 0:
        groups = [(0, len(counts.pods[0]))]
    else:
        fc = tree.first_child[top - 1].tolist()
        groups = list(itertools.pairwise(fc))
    best: tuple[int, int, _Counts, list[tuple[int, int]]] | None = None  # threshold, domains used, pruned subtree
    for lo, hi in groups:
        ranges = _ranges(tree, top=top, lo=lo, hi=hi)
        greedy = _greedy_count(counts.slices[top + 1][ranges[1][0] : ranges[1][1]], need)
        if greedy is None:
            continue
        threshold = min(need // greedy[0], greedy[1])
        if best is not None and threshold < best[0]:
            continue
        sub = _pruned(tree, leaf_pods, counts, req, ranges, threshold=threshold)
        after = _greedy_count(sub.slices[0], need)
        if after is None:
            continue
        if best is None or threshold > best[0] or after[0] < best[1]:
            best = (threshold, after[0], sub, ranges)
    if best is None:
        return None
    threshold, _, sub, ranges = best
    pruned = _spliced(counts, sub, ranges)
    applied = _apply_balanced(tree, pruned, req, lo=ranges[0][0], hi=ranges[0][1], threshold=threshold)
    return None if applied is None else (*applied, pruned)


def _place_pod_set(
    tree: _Tree,
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
    req = _request(tree, count=count, mode=mode, level=level, slices=slices)
    if req is None:
        return None
    leaf_pods = free[tree.leaves] // gpus
    if req.unconstrained and req.level == len(tree.starts) - 1:
        return _least_free_capacity(leaf_pods, count=count)
    counts = _fill_counts(tree, leaf_pods, req)
    start = None
    if balanced and not req.required and not req.unconstrained:
        start = _balanced(tree, leaf_pods, counts, req)
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
        self._trees = PerPlatform(_build_tree)

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
