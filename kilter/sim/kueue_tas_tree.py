"""Kueue TAS's topology tree and phase 1 over arrays: the tree of one platform, a pod set's request resolved as
Kueue resolves it, and the per-level pod and slice counts (``fillInCounts``) the placement reads.

``kueue_tas`` places with these (phase 2, BestFit); ``kueue_tas_balanced`` adds the ``TASBalancedPlacement``
gate over the same counts. The module docstring of ``kueue_tas`` says what upstream code this follows.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from kilter.sim.gangs import Slices, TopologyMode
from kilter.topology.fleet import Fleet

__all__ = [
    "Counts",
    "Ints",
    "TasRequest",
    "TasTree",
    "build_tree",
    "children_of",
    "fill_counts",
    "labelled_domains",
    "resolve_request",
    "sorted_domains",
    "subtree_counts",
    "subtree_ranges",
]

Ints = npt.NDArray[np.int64]
_MAX_LAYERS = 3  # the webhook's limit on podset-slice-required-topology-constraints


@dataclass(frozen=True, slots=True)
class TasTree:
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


class Counts(NamedTuple):
    """Phase 1's per-level capacities: pods each domain holds and slices it holds (``slices[l] is pods[l]`` when
    the request asks no slices)."""

    pods: list[Ints]
    slices: list[Ints]


@dataclass(frozen=True, slots=True)
class TasRequest:
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


def build_tree(fleet: Fleet, platform: int) -> TasTree:
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
    return TasTree(nodes.astype(np.int32), tuple(starts), tuple(parent), first_child, n_leaves)


def resolve_request(tree: TasTree, *, count: int, mode: TopologyMode, level: int, slices: Slices) -> TasRequest | None:
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
        TasRequest, count, requested, required=mode == "required", unconstrained=mode == "unconstrained"
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


def subtree_ranges(tree: TasTree, *, top: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """The ids of the subtree under level-``top`` domains ``lo``..``hi - 1``: (first, end) per level from ``top``."""
    out = [(lo, hi)]
    for lv in range(top, len(tree.starts) - 1):
        first, end = out[-1]
        out.append((int(tree.first_child[lv][first]), int(tree.first_child[lv][end])))
    return out


def subtree_counts(
    tree: TasTree, leaf_pods: Ints, req: TasRequest, ranges: list[tuple[int, int]], *, rounded: bool
) -> Counts:
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
        return Counts(pods, pods)
    slices = [np.zeros_like(p) for p in pods]
    at = req.slice_level - top
    slices[at] = pods[at] // req.slice_size
    for k in range(at - 1, -1, -1):
        (first, end), (child_first, _) = ranges[k], ranges[k + 1]
        slices[k] = np.add.reduceat(slices[k + 1], tree.first_child[k + top][first:end] - child_first)
    return Counts(pods, slices)


def fill_counts(tree: TasTree, leaf_pods: Ints, req: TasRequest) -> Counts:
    """Phase 1 (``fillInCounts``) over the whole tree."""
    return subtree_counts(tree, leaf_pods, req, [(0, len(s)) for s in tree.starts], rounded=True)


def sorted_domains(ids: Ints, counts: Counts, level: int, *, least_free: bool) -> tuple[Ints, Ints]:
    """``sortedDomains`` of ascending ``ids``: slices descending (LeastFreeCapacity: ascending), then pods
    ascending, then level values; returns the ids and their slices in that order."""
    slices = counts.slices[level][ids]
    key = slices if least_free else -slices
    if counts.slices[level] is counts.pods[level]:
        order = np.argsort(key, kind="stable")
    else:
        order = np.lexsort((ids, counts.pods[level][ids], key))
    return ids[order], slices[order]


def children_of(tree: TasTree, level: int, parents: Ints) -> tuple[Ints, Ints]:
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
