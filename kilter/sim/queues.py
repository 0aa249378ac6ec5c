"""The quota side of a simulation: a Kueue cohort tree, which flavor is which platform, which tenant is which queue.

Users describe queues as Kueue objects (ClusterQueues, Cohorts,
ResourceFlavors), so a simulated queue setup is the same YAML they would
apply. A flavor stands for a platform of the fleet when its ``nodeLabels``
select that platform's nodes, or, with no ResourceFlavor object, when it is
named after the platform (``gb200-nvl72`` for GB200-NVL72). Without any
queue file the whole fleet is one ClusterQueue, ``default``, whose nominal
quota is every GPU of every platform.

A trace's tenant column meets ClusterQueues by name; tenants with no
ClusterQueue of their name are dealt out to the ClusterQueues in turn, the
busiest tenant to the queue with the most nominal GPU quota, so the mapping
is stable, puts big tenants where the quota is, and is printed in the report.

ClusterQueues and Cohorts may carry the split-wait annotations
(``kilter.dev/split-wait``, ``kilter.dev/split-wait-max``); each
ClusterQueue gets each setting from itself, else from its nearest Cohort
that sets it (``split_wait_overrides``), and the flags fill in the rest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from kilter.model.errors import InputError
from kilter.model.kueue import ClusterQueue, Cohort, ResourceFlavor
from kilter.quota.config import FairSharingConfig
from kilter.quota.tree import QuotaTree, build_tree
from kilter.topology import split_wait
from kilter.topology.fleet import Fleet

__all__ = ["DEFAULT_QUEUE", "QueueSetup", "default_objects", "queue_setup"]

DEFAULT_QUEUE = "default"


@dataclass
class QueueSetup:
    """The tree, and per ClusterQueue the (platform index, flavor) pairs it can run on, in flavor order."""

    tree: QuotaTree
    flavors: dict[str, list[tuple[int, str]]]
    queue_of: dict[str, str] = field(default_factory=dict)
    split_wait: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # (factor, cap s)

    @property
    def cluster_queues(self) -> list[str]:
        return sorted(self.flavors)


def flavor_name(platform: str) -> str:
    return platform.lower()


def default_objects(fleet: Fleet) -> list[dict[str, Any]]:
    """One ClusterQueue holding the whole fleet: a resource group per device resource, a flavor per platform."""
    totals: dict[str, int] = {}
    gpus = fleet.bitmap.node_gpu_counts
    plats = fleet.bitmap.domain_platforms[fleet.node_domain]
    for i, p in enumerate(fleet.platforms):
        totals[p.name] = int(gpus[plats == i].sum())
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in fleet.platforms:
        groups.setdefault(p.device_resource, []).append(
            {"name": flavor_name(p.name), "resources": [{"name": p.device_resource, "nominalQuota": totals[p.name]}]}
        )
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": DEFAULT_QUEUE},
            "spec": {
                "resourceGroups": [{"coveredResources": [r], "flavors": flavors} for r, flavors in groups.items()]
            },
        }
    ]


def _decode(objects: Iterable[Any], kind: str, type_: type[Any]) -> list[Any]:
    out = []
    for obj in objects:
        if isinstance(obj, dict) and obj.get("kind") == kind:
            try:
                out.append(msgspec.convert(obj, type_))
            except msgspec.ValidationError as exc:
                name = (obj.get("metadata") or {}).get("name", "?")
                raise InputError(f"{kind} {name}: {exc}") from None
    return out


def _platforms_of(flavor: str, rf: ResourceFlavor | None, fleet: Fleet) -> list[int]:
    """Platforms whose nodes the flavor selects (a ResourceFlavor without nodeLabels selects every node)."""
    if rf is None:
        return [i for i, p in enumerate(fleet.platforms) if flavor_name(p.name) == flavor.lower()]
    if not rf.spec.node_labels:
        return list(range(len(fleet.platforms)))
    found: set[int] = set()
    for node, labels in enumerate(fleet.node_labels):
        if all(labels.get(k) == v for k, v in rf.spec.node_labels.items()):
            found.add(int(fleet.bitmap.domain_platforms[fleet.node_domain[node]]))
    return sorted(found)


def queue_setup(objects: Sequence[Any], fleet: Fleet, tenants: Counter[str]) -> QueueSetup:
    """The quota tree of these Kueue objects (or the default queue) and the tenant → ClusterQueue mapping."""
    cqs: list[ClusterQueue] = _decode(objects, "ClusterQueue", ClusterQueue)
    cohorts: list[Cohort] = _decode(objects, "Cohort", Cohort)
    rfs = {rf.metadata.name: rf for rf in _decode(objects, "ResourceFlavor", ResourceFlavor)}
    if not cqs:
        if objects:
            raise InputError("the queue file holds no ClusterQueue")
        cqs = _decode(default_objects(fleet), "ClusterQueue", ClusterQueue)
    tree = build_tree(cqs, cohorts)
    tree.raise_problems()
    flavors: dict[str, list[tuple[int, str]]] = {}
    for cq in cqs:
        pairs: list[tuple[int, str]] = []
        for group in cq.spec.resource_groups:
            for fq in group.flavors:
                for p in _platforms_of(fq.name, rfs.get(fq.name), fleet):
                    if fleet.platforms[p].device_resource in group.covered_resources:
                        pairs.append((p, fq.name))
        flavors[cq.metadata.name] = pairs
    if not any(flavors.values()):
        names = ", ".join(p.name for p in fleet.platforms)
        raise InputError(f"no ClusterQueue has a flavor for any platform of the fleet ({names})")
    gpus = {p.device_resource for p in fleet.platforms}
    nominal = {
        name: sum(q.nominal for (_, resource), q in tree.cluster_queues[name].quotas.items() if resource in gpus)
        for name in flavors
    }
    by_size = sorted(flavors, key=lambda name: (-nominal[name], name))
    return QueueSetup(tree, flavors, map_tenants(tenants, by_size), split_wait_overrides(cqs, cohorts))


def split_wait_overrides(
    cqs: Sequence[ClusterQueue], cohorts: Sequence[Cohort]
) -> dict[str, tuple[float | None, float | None]]:
    """Per ClusterQueue, the split-wait (factor, cap in seconds) its annotations set, each else its nearest
    Cohort's; None where none sets it (``split_wait.queue_settings``). A value that does not read refuses the
    queues: they are the user's own file."""
    resolved = split_wait.queue_settings(cqs, cohorts)
    if resolved.problems:
        raise resolved.problems[0].refusal()
    return dict(resolved.settings)


def map_tenants(tenants: Counter[str], queues: Sequence[str]) -> dict[str, str]:
    """Each tenant's ClusterQueue: the one of its name, else dealt out in ``queues``' order, busiest tenant first."""
    out = {t: t for t in tenants if t in queues}
    rest = sorted((t for t in tenants if t not in out), key=lambda t: (-tenants[t], t))
    for i, t in enumerate(rest):
        out[t] = queues[i % len(queues)]
    return out


def fair_sharing(fair: bool) -> FairSharingConfig:
    """Kueue's fair sharing (``fair``) or its classical ordering (``fifo``)."""
    return FairSharingConfig(enabled=fair)
