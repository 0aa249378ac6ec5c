"""Admission fair sharing: ordering LocalQueues of one ClusterQueue by their decayed usage.

Kueue (``pkg/util/admissionfairsharing``, the LocalQueue controller and the
queue ordering) keeps per LocalQueue an exponentially decayed ``consumed``
usage, ``consumed ← consumed·(1 − α) + current·α`` with
``α = 1 − 0.5^(Δt / usageHalfLifeTime)``, and orders a ClusterQueue whose
``admissionScope.admissionMode`` is ``UsageBasedAdmissionFairSharing`` by
``Σ_r weight_r · consumed_r / LocalQueue weight`` (raw base units: cores,
bytes, devices), lower first, before priority; a LocalQueue weight of 0 puts
it last. Preemption takes from the heavier LocalQueue of a queue first. A
half-life of 0 (Kueue's default) leaves every LocalQueue at 0: no effect.

From a snapshot, ``consumed`` is the LocalQueue's status advanced to ``now``
with its current admitted usage, which is Kueue's next reconcile. The entry
penalties Kueue keeps in memory between reconciles are not in any object and
are not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kilter.model import quantity
from kilter.model.kueue import LocalQueue
from kilter.quota.policy import parse_time
from kilter.quota.tree import QuotaTree
from kilter.quota.usage import WorkloadInfo

__all__ = ["AFS_MODE", "AdmissionFairSharingConfig", "alpha", "local_queue_usage"]

AFS_MODE = "UsageBasedAdmissionFairSharing"
LQKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class AdmissionFairSharingConfig:
    """Kueue's ``admissionFairSharing`` configuration block."""

    usage_half_life_s: float = 0.0
    usage_sampling_interval_s: float = 300.0
    resource_weights: Mapping[str, float] = field(default_factory=dict)


def alpha(dt_s: float, half_life_s: float) -> float:
    """``CalculateAlphaRate``: the weight of the newest sample; 0 when the half-life is 0."""
    if half_life_s == 0:
        return 0.0
    return 1.0 - math.pow(0.5, dt_s / half_life_s)


def _base_units(resource: str, amount: int) -> float:
    return amount / 1000 if resource == "cpu" else float(amount)


def local_queue_usage(
    tree: QuotaTree,
    local_queues: Iterable[LocalQueue],
    admitted: Iterable[WorkloadInfo],
    config: AdmissionFairSharingConfig,
    *,
    now: float,
) -> dict[LQKey, float]:
    """U(LQ) for every LocalQueue of a ClusterQueue in admission-fair-sharing mode."""
    current: dict[LQKey, dict[str, float]] = {}
    for w in admitted:
        per = current.setdefault((w.namespace, w.local_queue), {})
        for (_, resource), v in w.usage.items():
            per[resource] = per.get(resource, 0.0) + _base_units(resource, v)
    out: dict[LQKey, float] = {}
    for lq in local_queues:
        cq = tree.cluster_queues.get(lq.spec.cluster_queue)
        if cq is None or cq.admission_mode != AFS_MODE:
            continue
        key = (lq.metadata.namespace, lq.metadata.name)
        path = f"LocalQueue {key[0]}/{key[1]}"
        weight = 1.0
        if lq.spec.fair_sharing and lq.spec.fair_sharing.weight is not None:
            weight = float(
                quantity.parse_quantity(lq.spec.fair_sharing.weight, path=f"{path}: spec.fairSharing.weight")
            )
        if config.usage_half_life_s == 0:
            out[key] = 0.0 if weight > 0 else math.inf
            continue
        status = lq.status.fair_sharing.admission_fair_sharing_status if lq.status.fair_sharing else None
        consumed: dict[str, float] = {}
        last = now
        if status is not None:
            for r, q in status.consumed_resources.items():
                consumed[r] = float(quantity.parse_quantity(q, path=f"{path}: status"))
            if status.last_update:
                last = parse_time(status.last_update, path=f"{path}: status.lastUpdate")
        a = alpha(max(0.0, now - last), config.usage_half_life_s)
        now_usage = current.get(key, {})
        for r in set(consumed) | set(now_usage):
            consumed[r] = consumed.get(r, 0.0) * (1 - a) + now_usage.get(r, 0.0) * a
        if weight <= 0:
            out[key] = math.inf
            continue
        total = sum(config.resource_weights.get(r, 1.0) * v for r, v in consumed.items())
        out[key] = total / weight
    return out
