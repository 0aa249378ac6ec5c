"""What a node can admit now and could ever admit: Kueue's ``resource_node.go`` functions.

``available(node, fr)`` is the capacity usable right now: the node's own
unused local quota plus what its parent can give, capped by the node's
borrowing limit (``stored − used + borrowingLimit`` where ``stored`` is what
the node lends its parent). It can be negative after over-admission.
``potential_available(node, fr)`` is the same with zero usage anywhere: the
most the node could ever hold. ``add_usage``/``remove_usage`` move usage and
push the part above local quota up the tree, as the cache does on admission.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kilter.quota import amount
from kilter.quota.tree import FR, QuotaNode

__all__ = [
    "add_usage",
    "available",
    "fits_within_quota",
    "is_within_nominal",
    "local_available",
    "potential_available",
    "remove_usage",
]


def local_available(node: QuotaNode, fr: FR) -> int:
    """Guaranteed quota of ``fr`` that exceeds usage and that the parent cannot see."""
    return max(0, node.local.get(fr, 0) - node.usage.get(fr, 0))


_NOTHING: Mapping[int, int] = {}


def available(node: QuotaNode, fr: FR, *, less: Mapping[int, int] = _NOTHING) -> int:
    """Capacity of ``fr`` the node can use now (``available`` in Kueue); may be negative.

    ``less`` lowers the usage of nodes (by ``id``) for a what-if without touching the tree.
    """
    path = []
    n = node
    while n.parent is not None:
        path.append(n)
        n = n.parent
    avail = amount.sub(n.subtree.get(fr, 0), n.usage.get(fr, 0) - less.get(id(n), 0))
    for n in reversed(path):
        local = n.local.get(fr, 0)
        used = n.usage.get(fr, 0) - less.get(id(n), 0)
        q = n.quotas.get(fr)
        if q is not None and q.borrowing_limit is not None:
            stored = amount.sub(n.subtree.get(fr, 0), local)
            avail = min(avail, amount.add(amount.sub(stored, max(0, used - local)), q.borrowing_limit))
        if used < local:
            avail = amount.add(local - used, avail)
    return avail


def potential_available(node: QuotaNode, fr: FR) -> int:
    """The most of ``fr`` the node could use with no usage anywhere (``potentialAvailable``)."""
    path = [node, *node.ancestors()]
    pot = path[-1].subtree.get(fr, 0)
    for n in reversed(path[:-1]):
        pot = amount.add(n.local_quota(fr), pot)
        q = n.quotas.get(fr)
        if q is not None and q.borrowing_limit is not None:
            pot = min(pot, amount.add(n.subtree.get(fr, 0), q.borrowing_limit))
    return pot


def add_usage(node: QuotaNode, fr: FR, value: int) -> None:
    """Book ``value`` on the node and push what its local quota cannot hold to the parent."""
    n: QuotaNode | None = node
    while n is not None and value:
        used = n.usage.get(fr, 0)
        spare = max(0, n.local.get(fr, 0) - used)
        n.usage[fr] = used + value
        if n.parent is None or value <= spare:
            return
        value -= spare
        n = n.parent


def remove_usage(node: QuotaNode, fr: FR, value: int) -> None:
    """Undo ``add_usage``: take back what the node had stored in its parent, up the tree."""
    n: QuotaNode | None = node
    while n is not None and value:
        used = n.usage.get(fr, 0)
        stored_in_parent = used - n.local.get(fr, 0)
        if used != value:
            n.usage[fr] = used - value
        else:
            n.usage.pop(fr, None)
        if stored_in_parent <= 0 or n.parent is None:
            return
        value = min(value, stored_in_parent)
        n = n.parent


def fits_within_quota(node: QuotaNode, requests: Mapping[FR, int]) -> bool:
    """Usage plus ``requests`` stays within the node's subtree quota on every flavor/resource
    (the fit half of Kueue's ``QuantitiesFitInQuota``; no borrowing)."""
    return all(node.usage.get(fr, 0) + v <= node.subtree.get(fr, 0) for fr, v in requests.items())


def is_within_nominal(node: QuotaNode, frs: Iterable[FR]) -> bool:
    """No usage above the subtree quota on any of ``frs`` (``IsWithinNominalInResources``)."""
    return all(node.usage.get(fr, 0) <= node.subtree.get(fr, 0) for fr in frs)
