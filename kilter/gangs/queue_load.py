"""The queue a split would cost, read off the cluster's objects: every replica, and a restarted one, agree.

``topology.split_wait.QueueLoad`` prices a split by how many jobs waited,
on average, over the recent past as long as the gang's expected run. A
server keeps no history of its own for it: the objects carry it. A Kueue
Workload waited from its ``creationTimestamp`` until its quota was reserved
(the ``QuotaReserved`` condition's ``lastTransitionTime`` while ``True``),
and still waits while it has no reservation and has not finished. A Volcano
PodGroup still ``Pending`` or ``Inqueue`` waits since its creation (Volcano
stamps no time on leaving those phases, so a PodGroup that has started
tells nothing). Objects already deleted tell nothing either: what the
cluster no longer shows, the price leaves out.
"""

from __future__ import annotations

from collections.abc import Iterator

from kilter.model.kueue import Workload
from kilter.quota.policy import read_time
from kilter.state.cluster import ClusterState
from kilter.topology.backlog import Backlog
from kilter.topology.fleet import Fleet
from kilter.topology.split_wait import DEFAULT_MAX_S

__all__ = ["backlog_of", "usable_gpus", "waiting_span"]

_WAITING_PHASES = frozenset({"Pending", "Inqueue"})


def backlog_of(state: ClusterState, *, horizon_s: float = DEFAULT_MAX_S) -> Backlog:
    """The backlog of every Workload and PodGroup ``state`` holds, over spans the objects tell."""
    return Backlog.of_spans(_spans(state), horizon_s=horizon_s)


def waiting_span(workload: Workload) -> tuple[float, float | None] | None:
    """When a Workload waited: (created, quota reserved; None while it still waits), or None when the objects do
    not tell (no creation time, a reservation with no readable time, or finished with none on record)."""
    created = read_time(workload.metadata.creation_timestamp)
    if created is None:
        return None
    status = workload.status
    if status.condition("QuotaReserved"):
        reserved = read_time(status.since("QuotaReserved"))
        return None if reserved is None else (created, reserved)
    if status.condition("Finished"):
        return None
    return created, None


def usable_gpus(fleet: Fleet, platform: str | None) -> int:
    """The usable GPUs of the fleet's ``platform`` (every platform's with None): what a split's GPU-time is a
    share of."""
    bm = fleet.bitmap
    index = next((i for i, p in enumerate(fleet.platforms) if p.name == platform), None)
    usable = bm.domain_usable_gpus if index is None else bm.domain_usable_gpus[bm.domain_platforms == index]
    return int(usable.sum())


def _spans(state: ClusterState) -> Iterator[tuple[float, float | None]]:
    for wl in state.workloads:
        span = waiting_span(wl)
        if span is not None:
            yield span
    for group in state.pod_groups:
        created = read_time(group.metadata.creation_timestamp)
        if created is not None and group.status.phase in _WAITING_PHASES:
            yield created, None
