"""Kueue Topology-Aware Scheduling as a simulator baseline: BestFit for required/preferred, LeastFreeCapacity else.

Follows ``pkg/cache/scheduler/tas_flavor_snapshot.go`` of kubernetes-sigs/kueue
(read at ff69552e, v0.20.0-devel; the path without leaders or slices is the
same in v0.15.0, 1929d830). With the v0.15+ default gates (``TASProfileMixed``
on, ``TASBalancedPlacement`` off) one PodSet is placed in three steps:

* ``fillInCounts``: a leaf (node) holds ``floor(free / gpus_per_pod)`` pods, a
  domain the sum over its children.
* ``findLevelWithFitDomains`` at the requested level. BestFit sorts domains by
  capacity descending, ties by level values, and picks the fitting domain of
  least capacity (``findBestFitDomainBy``). When none fits, ``required`` fails
  and ``preferred`` asks one level up; at the top level it takes domains
  greedily, roomiest first, and best-fits the last one.
* ``updateCountsToMinimumGeneric`` on the way down: at each level the children
  of *all* chosen domains are pooled, sorted the same way and taken greedily,
  the last one best-fitted. Above the slice level (here: every level) Kueue
  does not keep the parents' split, so neither do we.

``unconstrained`` requests the lowest level (hostname) with LeastFreeCapacity:
the least-free node that holds every pod, else nodes in ascending capacity
order, each filled. Levels, coarsest first: the fleet's groups (spine, block),
the scale-up domain, the node. Ties fall to level values (group path, clique
id, hostname), which is group order, then the fleet's node index.

Simplifications: GPUs are the only resource. Kueue leaves a node without every
level label out of its tree, so detached nodes (clique label lost) and domains
without a group label are never used. Pod sets are placed one after the other
as the PodSets of one Workload are (``FindTopologyAssignmentsForFlavor``):
each on its own, the earlier ones' usage booked first, so a small last pod set
may land in another domain than the big one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter.sim.gangs import Gang, TopologyMode
from kilter.sim.placement import Nodes, PerPlatform, free_gpus
from kilter.topology.fleet import Fleet

__all__ = ["KueueTas", "labelled_domains"]

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class _Tree:
    """Kueue's topology tree over one platform's nodes, as arrays; levels coarsest first, the node level last.

    Leaves are in level-value order, and the domains of every level are
    numbered in that order, so a smaller id is an earlier level value: the tie
    key of every sort.
    """

    leaves: npt.NDArray[np.int32]  # fleet node index of each leaf
    starts: tuple[Ints, ...]  # per level: first leaf of each domain (for np.add.reduceat)
    parent: tuple[Ints, ...]  # per level: each domain's parent id one level up (level 0: all 0)

    @property
    def domain_level(self) -> int:
        return len(self.starts) - 2


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
        out[d] = not platform.is_multi_node or any(labels.get(k) for k in fleet.levels.domain_keys(platform))
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
    return _Tree(nodes.astype(np.int32), tuple(starts), tuple(parent))


def _take_best_fit(cand: Ints, caps: Ints, *, count: int) -> tuple[Ints, Ints] | None:
    """``updateCountsToMinimumGeneric`` with BestFit over candidates already sorted (capacity desc, level values).

    Takes whole domains in order until one holds the rest; that last one is
    swapped for the least-capacity domain further on that still holds the
    rest (``findBestFitDomainBy``: first of that capacity in the order).
    Returns chosen ids and their pod counts, or None when all together are short.
    """
    total = np.cumsum(caps)
    if not len(caps) or total[-1] < count:
        return None
    i = int(np.searchsorted(total, count))
    rest = count - int(total[i] - caps[i])
    tail = -caps[i:]  # ascending
    smallest_fit = tail[int(np.searchsorted(tail, -rest, side="right")) - 1]
    j = i + int(np.searchsorted(tail, smallest_fit))
    return np.append(cand[:i], cand[j]), np.append(caps[:i], rest)


def _best_fit_desc(ids: Ints, caps: Ints) -> tuple[Ints, Ints]:
    """BestFit's ``sortedDomains``: capacity descending, then level values (ids ascending)."""
    order = np.argsort(-caps, kind="stable")
    return ids[order], caps[order]


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
    return order[: i + 1], counts


def _place_pod_set(tree: _Tree, free: Ints, *, count: int, gpus: int, mode: TopologyMode) -> tuple[Ints, Ints] | None:
    """Leaves and pods per leaf for one pod set (``findTopologyAssignment``), or None where Kueue reports no fit."""
    if not len(tree.leaves):
        return None
    leaf_caps = free[tree.leaves] // gpus
    if mode == "unconstrained":
        return _least_free_capacity(leaf_caps, count=count)
    caps = [np.add.reduceat(leaf_caps, s) for s in tree.starts]
    level = tree.domain_level
    while caps[level].max() < count and mode == "preferred" and level > 0:
        level -= 1  # findLevelWithFitDomains: no domain holds the pod set, ask one level up
    if caps[level].max() < count and mode == "required":
        return None
    # One domain of the level holds it (best fit), or at the top level several do (greedy, last best fit).
    chosen = _take_best_fit(*_best_fit_desc(np.arange(len(caps[level])), caps[level]), count=count)
    while chosen is not None and level < len(caps) - 1:  # descend, children of all chosen domains pooled
        picked = np.zeros(len(caps[level]), dtype=bool)
        picked[chosen[0]] = True
        level += 1
        ids = np.flatnonzero(picked[tree.parent[level]])
        chosen = _take_best_fit(*_best_fit_desc(ids, caps[level][ids]), count=count)
    return chosen


class KueueTas:
    """Kueue TAS's placement (v0.15+ defaults), asked for the gang's request at the scale-up-domain level."""

    name = "kueue-tas"

    def __init__(self) -> None:
        self._trees = PerPlatform(_build_tree)

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        tree = self._trees.of(fleet, gang.platform)
        free = free_gpus(fleet).astype(np.int64)
        out: list[npt.NDArray[np.int32]] = []
        for count, gpus in gang.pod_sets:
            if count <= 0:
                continue
            chosen = _place_pod_set(tree, free, count=count, gpus=gpus, mode=gang.topology)
            if chosen is None:
                return None
            leaves, pods = chosen
            order = np.argsort(leaves)  # buildAssignment lists domains in level-value order
            nodes = tree.leaves[leaves[order]]
            free[nodes] -= pods[order] * gpus
            out.append(np.repeat(nodes, pods[order]))
        return np.concatenate(out).astype(np.int32) if out else np.zeros(0, dtype=np.int32)
