"""Kueue's ``TASBalancedPlacement`` gate (``tas_balanced_placement.go``, without leaders) over ``kueue_tas_tree``'s
counts: where a preferred request's descent starts when the gate is on, or None for BestFit (``kueue_tas``'s module
docstring says how upstream decides).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from kilter.sim.kueue_tas_tree import (
    Counts,
    Ints,
    TasRequest,
    TasTree,
    children_of,
    sorted_domains,
    subtree_counts,
    subtree_ranges,
)

__all__ = ["balanced_start"]


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
    tree: TasTree, leaf_pods: Ints, counts: Counts, req: TasRequest, ranges: list[tuple[int, int]], *, threshold: int
) -> Counts:
    """``pruneDomainsBelowThreshold`` on the requested-level domains ``ranges[0]``: the subtree's counts (as
    ``subtree_counts`` lists them) after pruning; phase 1's counts stay as they are for the BestFit fallback.

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
    sub = subtree_counts(tree, leaves, req, ranges, rounded=False)
    cut = sub.slices[0] < threshold
    if cut.any():
        leaves[np.repeat(cut, tree.n_leaves[top][lo:hi])] = 0
        sub = subtree_counts(tree, leaves, req, ranges, rounded=False)
    return sub


def _spliced(counts: Counts, sub: Counts, ranges: list[tuple[int, int]]) -> Counts:
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
    return Counts(pods, slices)


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
    tree: TasTree, counts: Counts, level: int, ids: Ints, *, need: int, size: int, by_entropy: bool
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
    tree: TasTree, counts: Counts, req: TasRequest, *, lo: int, hi: int, threshold: int
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
        fit_level, (fit, _) = top + 1, children_of(tree, top, np.sort(chosen))
    chosen = _select_optimal(tree, counts, fit_level, fit, need=need, size=size, by_entropy=False)
    if chosen is None or need < len(chosen) * threshold:
        return None
    ids, slices = sorted_domains(np.sort(chosen), counts, fit_level, least_free=False)
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


def balanced_start(
    tree: TasTree, leaf_pods: Ints, counts: Counts, req: TasRequest
) -> tuple[int, Ints, Ints, Counts] | None:
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
    best: tuple[int, int, Counts, list[tuple[int, int]]] | None = None  # threshold, domains used, pruned subtree
    for lo, hi in groups:
        ranges = subtree_ranges(tree, top=top, lo=lo, hi=hi)
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
