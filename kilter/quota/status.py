"""The state of every ClusterQueue and Cohort, as ``kilter queues`` shows it.

One pass over the tree: usage from the ledger, subtree quotas, then per node
its DRS (with decayed usage where the node asks for it), whether it borrows,
and per flavor/resource its quota, usage, ``available`` (clamped at 0, as
Kueue's ClusterQueue snapshot reports it) and ``potential_available``, ``borrowed`` and ``lent``.

Kueue does not say which queue lent what a borrower uses, so ``lent`` is the
most a node can be lending: the smaller of its unused lendable quota
(``min(lendingLimit or quota, quota - usage)``) and what its siblings borrow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kilter.quota import decay
from kilter.quota.available import available, is_within_nominal, potential_available
from kilter.quota.drs import DRS, LendableCache, dominant_resource_share
from kilter.quota.policy import DecayState
from kilter.quota.tree import FR, QuotaNode, QuotaTree

__all__ = ["QuotaNodeStatus", "ResourceStatus", "apply_usage", "tree_status"]


@dataclass(frozen=True)
class ResourceStatus:
    flavor: str
    resource: str
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None
    subtree_quota: int
    usage: int
    available: int
    potential_available: int
    borrowed: int = 0  # usage above its own (subtree) quota: what it takes from its cohort
    lent: int = 0  # at most this much of its unused lendable quota is used by the rest of its cohort


@dataclass(frozen=True)
class QuotaNodeStatus:
    name: str
    kind: str
    parent: str | None
    active: bool
    weight: float
    drs: DRS
    borrowing: bool
    resources: tuple[ResourceStatus, ...]
    decay: DecayState | None = None
    inactive_reason: str = ""  # Kueue's Active condition reason when not active
    inactive_message: str = ""


def apply_usage(tree: QuotaTree, per_cq: Mapping[str, Mapping[FR, int]]) -> None:
    """Set every ClusterQueue's usage, then re-derive subtree quotas and cohort usage."""
    for name, node in tree.cluster_queues.items():
        node.usage = dict(per_cq.get(name, {}))
    tree.recompute()


def _frs(node: QuotaNode) -> list[FR]:
    declared = list(node.quotas)
    extra = sorted(fr for fr in node.subtree if fr not in node.quotas)
    return declared + extra


def _borrowed(node: QuotaNode, fr: FR) -> int:
    """Usage above the node's own quota (for a ClusterQueue its nominal quota, for a Cohort its subtree's)."""
    return max(0, node.usage.get(fr, 0) - node.subtree.get(fr, 0)) if node.parent is not None else 0


def _lent(node: QuotaNode, fr: FR) -> int:
    """The most of the node's unused lendable quota its siblings can be using (module docstring)."""
    if node.parent is None:
        return 0
    quota = node.subtree.get(fr, 0)
    q = node.quotas.get(fr)
    lendable = quota if q is None or q.lending_limit is None else min(q.lending_limit, quota)
    unused = max(0, min(lendable, quota - node.usage.get(fr, 0)))
    others = sum(_borrowed(c, fr) for c in node.parent.children if c is not node)
    return min(unused, others)


def node_status(node: QuotaNode, lendable: LendableCache, *, now: float) -> QuotaNodeStatus:
    state = None
    usage_for_share = None
    if node.policy.half_life_s:
        state = decay.advance(node.policy.decay, node.usage, now=now, half_life_s=node.policy.half_life_s)
        usage_for_share = decay.effective_usage(node.usage, state)
    drs = dominant_resource_share(node, lendable=lendable, usage=usage_for_share)
    rows = []
    for fr in _frs(node) if node.active else []:
        q = node.quotas.get(fr)
        rows.append(
            ResourceStatus(
                flavor=fr[0],
                resource=fr[1],
                nominal=q.nominal if q else 0,
                borrowing_limit=q.borrowing_limit if q else None,
                lending_limit=q.lending_limit if q else None,
                subtree_quota=node.subtree.get(fr, 0),
                usage=node.usage.get(fr, 0),
                available=max(0, available(node, fr)),
                potential_available=potential_available(node, fr),
                borrowed=_borrowed(node, fr),
                lent=_lent(node, fr),
            )
        )
    borrowing = node.parent is not None and not is_within_nominal(node, node.subtree)
    return QuotaNodeStatus(
        name=node.name,
        kind=node.kind,
        parent=node.parent.name if node.parent else (node.parent_name or None),
        active=node.active,
        weight=node.weight,
        drs=drs,
        borrowing=borrowing,
        resources=tuple(rows),
        decay=state,
        inactive_reason=node.inactive_reason,
        inactive_message=node.inactive_message,
    )


def tree_status(tree: QuotaTree, *, now: float) -> tuple[list[QuotaNodeStatus], list[QuotaNodeStatus]]:
    """Status of every ClusterQueue and every Cohort, each list sorted by name."""
    lendable = LendableCache()
    cqs = [node_status(tree.cluster_queues[n], lendable, now=now) for n in sorted(tree.cluster_queues)]
    cos = [node_status(tree.cohorts[n], lendable, now=now) for n in sorted(tree.cohorts)]
    return cqs, cos
