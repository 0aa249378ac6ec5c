"""Dominant resource share, exactly as Kueue computes it (``fair_sharing.go``).

For a node with a parent: per flavor/resource in its subtree quota,
``borrowed = request + usage − subtree`` where positive, summed per resource
name across flavors; ``lendable[r]`` is, over every flavor of ``r`` anywhere
in the tree, the parent's ``potential_available`` (so it includes the node's
own nominal and flavors it cannot use); ``ratio = borrowed × 1000 / lendable``
as a float, resources with nothing lendable skipped; the dominant resource is
the largest ratio, ties to the alphabetically first name. The weighted share
divides by ``fairSharing.weight``; a zero-weight node that borrows is +Inf.
Roots and cohort-less ClusterQueues always have share 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from kilter.quota import amount
from kilter.quota.available import potential_available
from kilter.quota.tree import FR, QuotaNode

__all__ = ["DRS", "LendableCache", "compare", "dominant_resource_share"]

MAX_INT64 = 2**63 - 1


@dataclass(frozen=True)
class DRS:
    weight: float
    ratio: float = 0.0
    dominant_resource: str = ""
    borrowing: bool = False
    borrowed_frs: tuple[FR, ...] = ()

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight == 0 and self.borrowing

    @property
    def weighted_share(self) -> float:
        """``PreciseWeightedShare``: +Inf for a zero-weight borrower, 0 without borrowing."""
        if self.zero_weight_borrows:
            return math.inf
        if self.ratio == 0:
            return 0.0
        return self.ratio / self.weight

    @property
    def rounded_weighted_share(self) -> int:
        """``status.fairSharing.weightedShare``: ceil of the share, MaxInt64 for +Inf."""
        return MAX_INT64 if self.zero_weight_borrows else math.ceil(self.weighted_share)

    def is_borrowing_on(self, requested: Mapping[FR, int]) -> bool:
        return any(requested.get(fr, 0) > 0 for fr in self.borrowed_frs)


def compare(a: DRS, b: DRS) -> int:
    """``CompareDRS``: two zero-weight borrowers compare unweighted; one is above everything."""
    if a.zero_weight_borrows and b.zero_weight_borrows:
        return (a.ratio > b.ratio) - (a.ratio < b.ratio)
    if a.zero_weight_borrows:
        return 1
    if b.zero_weight_borrows:
        return -1
    x, y = a.weighted_share, b.weighted_share
    return (x > y) - (x < y)


class LendableCache:
    """``calculateLendable`` per parent, memoised: it depends on quotas only, not on usage."""

    def __init__(self) -> None:
        self._by_parent: dict[int, dict[str, int]] = {}

    def of(self, parent: QuotaNode) -> dict[str, int]:
        key = id(parent)
        cached = self._by_parent.get(key)
        if cached is None:
            cached = {}
            for fr in parent.root().subtree:
                cached[fr[1]] = amount.add(cached.get(fr[1], 0), potential_available(parent, fr))
            self._by_parent[key] = cached
        return cached


def dominant_resource_share(
    node: QuotaNode,
    request: Mapping[FR, int] | None = None,
    *,
    lendable: LendableCache | None = None,
    usage: Mapping[FR, int] | None = None,
) -> DRS:
    """The node's DRS with ``request`` added; ``usage`` overrides the node's usage (decayed shares)."""
    if node.parent is None:
        return DRS(node.weight)
    used = node.usage if usage is None else usage
    request = request or {}
    borrowed: dict[str, int] = {}
    borrowed_frs: list[FR] = []
    for fr, quota in node.subtree.items():
        if quota == amount.UNLIMITED:
            continue  # nothing is borrowed above an unlimited quota (U - U = 0, x - U < 0)
        b = request.get(fr, 0) + used.get(fr, 0) - quota
        if b > 0:
            resource = fr[1]
            borrowed[resource] = amount.add(borrowed.get(resource, 0), min(b, amount.UNLIMITED - 1))
            borrowed_frs.append(fr)
    if not borrowed:
        return DRS(node.weight)
    lend = (lendable or LendableCache()).of(node.parent)
    ratio = 0.0
    dominant = ""
    for resource, b in borrowed.items():
        lr = lend.get(resource, 0)
        if lr > 0:
            r = float(b) * 1000.0 / float(lr)
            if r > ratio or (r == ratio and resource < dominant):
                ratio, dominant = r, resource
    return DRS(node.weight, ratio, dominant, True, tuple(borrowed_frs))
