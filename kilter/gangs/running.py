"""Running gangs: their pods and GPUs, the scale-up domains they use and the fewest they could have used.

What ``kubectl kilter top`` shows and the placement API can serve. One pass
over the pods the fleet books GPUs for (``inventory.booked_gang_pods``: the
gang key from the pod's own labels; its GPUs, the very number the fleet holds
for it), then per gang a few array operations.
A gang's minimum is ``split_wait.fewest_domains_idle`` for its pod shapes on
its platform, the same bound the split-wait rule judges with, computed once
per distinct (platform, shapes). Its start is its earliest pod's
``creationTimestamp``: the store keeps no pod start time, and a gang's pods
are created together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kilter.gangs.inventory import booked_gang_pods
from kilter.model.core_v1 import Pod
from kilter.quota.policy import parse_time
from kilter.state.store import ClusterStore, pod_uid
from kilter.topology.fleet import Fleet
from kilter.topology.split_wait import fewest_domains_idle

__all__ = ["RunningGang", "placed_domains", "running_gangs"]


@dataclass(frozen=True)
class RunningGang:
    """One gang with pods bound to GPU nodes."""

    key: str  # GangKey.format()
    namespace: str
    platform: str
    pods: int  # bound, not finished
    gpus: int
    domains: tuple[str, ...]  # scale-up domains its pods are on, by name
    domains_min: int  # the fewest domains the idle fleet could hold these pods in (0: it could not)
    started_s: float | None  # its earliest pod's creationTimestamp (Unix seconds)
    nodes: tuple[str, ...]  # the nodes of its pods, one per pod, sorted


def placed_domains(store: ClusterStore, fleet: Fleet, pods: Iterable[Pod]) -> set[int]:
    """The domains (fleet indices) of the nodes these pods are bound to, or that kilter bound them to (assumed)."""
    out: set[int] = set()
    for pod in pods:
        index = fleet.node_index.get(pod.spec.node_name) if pod.spec.node_name else None
        if index is None and not pod.spec.node_name:
            booking = store.booking(pod_uid(pod))
            index = booking.node if booking is not None else None
        if index is not None:
            out.add(int(fleet.node_domain[index]))
    return out


def _members(store: ClusterStore, namespace: str | None) -> dict[str, list[tuple[int, int, str]]]:
    """Per gang key, (node index, GPUs, creationTimestamp) of each of its pods the fleet books."""
    out: dict[str, list[tuple[int, int, str]]] = {}
    for key, pod, booking in booked_gang_pods(store):
        meta = pod.metadata
        if namespace is None or meta.namespace == namespace:
            out.setdefault(key, []).append((booking.node, booking.gpus, meta.creation_timestamp or ""))
    return out


def running_gangs(store: ClusterStore, *, namespace: str | None = None) -> list[RunningGang]:
    """Every gang with bound GPU pods (of ``namespace``, or all), the most GPUs first, then by key."""
    fleet = store.fleet()
    minimum: dict[tuple[int, tuple[tuple[int, int], ...]], int] = {}
    out = []
    for key, members in _members(store, namespace).items():
        nodes = np.fromiter((m[0] for m in members), dtype=np.int64, count=len(members))
        domain_index = np.unique(fleet.node_domain[nodes])
        platform = int(fleet.bitmap.domain_platforms[domain_index[0]])
        shapes = tuple(sorted(Counter(m[1] for m in members).items()))
        shape_key = (platform, tuple((count, g) for g, count in shapes))
        if shape_key not in minimum:
            minimum[shape_key] = fewest_domains_idle(fleet, platform, shape_key[1])
        stamps = [m[2] for m in members if m[2]]
        out.append(
            RunningGang(
                key,
                key.split("/", 1)[0],
                fleet.platforms[platform].name,
                len(members),
                sum(m[1] for m in members),
                tuple(sorted(fleet.domain_ids[int(d)] for d in domain_index)),
                minimum[shape_key],
                parse_time(min(stamps), path=f"gang {key}: creationTimestamp") if stamps else None,
                tuple(sorted(fleet.node_names[int(n)] for n in nodes)),
            )
        )
    out.sort(key=lambda g: (-g.gpus, g.key))
    return out
