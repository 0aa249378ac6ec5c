"""Admission fair sharing: Kueue's decay law, LocalQueues before priority, preemption from the heavier LocalQueue."""

from __future__ import annotations

import math
from typing import Any

import pytest

from kilter.model import codec
from kilter.model.kueue import LocalQueue
from kilter.quota.admit import admission_order, by_cluster_queue
from kilter.quota.afs import AdmissionFairSharingConfig, alpha, local_queue_usage
from kilter.quota.config import FairSharingConfig
from kilter.quota.preempt import find_targets
from kilter.quota.shares import Shares
from kilter.quota.usage import WorkloadInfo
from tests.quota.builders import cq, tree

GPU = ("h100", "nvidia.com/gpu")
HOUR = 3600.0


def afs_cq(name: str, nominal: int, **kw: Any) -> Any:
    obj = cq(name, {GPU: nominal}, **kw)
    from kilter.model.kueue import AdmissionScope

    obj.spec.admission_scope = AdmissionScope("UsageBasedAdmissionFairSharing")
    return obj


def lq(
    name: str, cq_name: str, *, consumed: float | None = None, last: str = "", weight: str | None = None
) -> LocalQueue:
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": "ns"}, "spec": {"clusterQueue": cq_name}}
    if weight is not None:
        obj["spec"]["fairSharing"] = {"weight": weight}
    if consumed is not None:
        obj["status"] = {
            "fairSharing": {
                "admissionFairSharingStatus": {
                    "consumedResources": {"nvidia.com/gpu": str(consumed)},
                    "lastUpdate": last,
                }
            }
        }
    return codec.convert(obj, LocalQueue)


def wl(name: str, lq_name: str, *, priority: int = 0, gpus: int = 1, reserved: float | None = None) -> WorkloadInfo:
    if reserved is not None:
        return WorkloadInfo("ns", name, f"uid-{name}", "q", lq_name, priority, 0.0, True, reserved, usage={GPU: gpus})
    return WorkloadInfo("ns", name, f"uid-{name}", "q", lq_name, priority, 0.0, False, requests={GPU[1]: gpus})


def test_alpha_is_one_minus_a_half_per_half_life_and_zero_without_one() -> None:
    assert alpha(HOUR, HOUR) == pytest.approx(0.5)
    assert alpha(2 * HOUR, HOUR) == pytest.approx(0.75)
    assert alpha(HOUR, 0.0) == 0.0


def test_constant_usage_reaches_half_after_one_half_life() -> None:
    # Usage 2 GPUs from consumed 0 at t0; after one half-life (168h) consumed is 1 (Kueue's convergence example).
    t = tree([afs_cq("q", 8)])
    usage = local_queue_usage(
        t,
        [lq("team", "q", consumed=0.0, last="2026-12-01T00:00:00Z")],
        [wl("a", "team", gpus=2, reserved=0.0)],
        AdmissionFairSharingConfig(168 * HOUR),
        now=1_796_083_200.0 + 168 * HOUR,
    )
    assert usage[("ns", "team")] == pytest.approx(1.0)


def test_the_lighter_local_queue_goes_first_even_against_priority() -> None:
    t = tree([afs_cq("q", 8)])
    lqs = [
        lq("heavy", "q", consumed=50, last="2026-12-01T00:00:00Z"),
        lq("light", "q", consumed=5, last="2026-12-01T00:00:00Z"),
    ]
    now = 1_796_083_200.0
    usage = local_queue_usage(t, lqs, [], AdmissionFairSharingConfig(HOUR), now=now)
    pending = [wl("important", "heavy", priority=100), wl("modest", "light", priority=0)]
    decisions = admission_order(t, pending, {}, config=FairSharingConfig(), now=now, lq_usage=usage)
    assert [d.workload.name for d in decisions] == ["modest", "important"]


def test_a_queue_not_in_afs_mode_keeps_priority_order_and_weight_zero_goes_last() -> None:
    t = tree([cq("q", {GPU: 8})])
    lqs = [lq("heavy", "q", consumed=50), lq("light", "q", consumed=5)]
    usage = local_queue_usage(t, lqs, [], AdmissionFairSharingConfig(HOUR), now=0.0)
    assert usage == {}
    t = tree([afs_cq("q", 8)])
    usage = local_queue_usage(
        t, [lq("muted", "q", weight="0"), lq("light", "q")], [], AdmissionFairSharingConfig(HOUR), now=0.0
    )
    assert math.isinf(usage[("ns", "muted")]) and usage[("ns", "light")] == 0.0


def test_resource_weights_scale_each_resource() -> None:
    t = tree([afs_cq("q", 8)])
    admitted = [
        WorkloadInfo("ns", "a", "uid-a", "q", "team", 0, 0.0, True, 0.0, usage={GPU: 2, ("h100", "memory"): 2**30})
    ]
    plain = local_queue_usage(
        t,
        [lq("team", "q", consumed=0, last="2026-12-01T00:00:00Z")],
        admitted,
        AdmissionFairSharingConfig(HOUR),
        now=1_796_083_200.0 + HOUR,
    )
    weighted = local_queue_usage(
        t,
        [lq("team", "q", consumed=0, last="2026-12-01T00:00:00Z")],
        admitted,
        AdmissionFairSharingConfig(HOUR, resource_weights={"memory": 0.0}),
        now=1_796_083_200.0 + HOUR,
    )
    assert plain[("ns", "team")] == pytest.approx((2 + 2**30) / 2)
    assert weighted[("ns", "team")] == pytest.approx(1.0)


def test_preemption_takes_from_the_heavier_local_queue_before_priority() -> None:
    t = tree([afs_cq("q", 8, preemption={"withinClusterQueue": "LowerPriority"})], usage={"q": {GPU: 8}})
    admitted = [
        wl("light-low", "light", priority=0, gpus=4, reserved=1.0),
        wl("heavy-mid", "heavy", priority=5, gpus=4, reserved=1.0),
    ]
    lq_usage = {("ns", "heavy"): 40.0, ("ns", "light"): 1.0}
    result = find_targets(
        t,
        by_cluster_queue(admitted),
        t.cluster_queues["q"],
        wl("new", "light", priority=10),
        {GPU: 4},
        config=FairSharingConfig(),
        shares=Shares(t, now=0.0),
        now=0.0,
        lq_usage=lq_usage,
    )
    assert [x.workload.name for x in result.targets] == ["heavy-mid"]
