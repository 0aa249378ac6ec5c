"""Which node labels name a node's scale-up domain and the levels above it.

A Kueue ``Topology`` in the cluster wins: its levels (minus hostname and the
scale-up-domain labels) are the levels above the domain, and if none of its
levels is a known domain label, its lowest non-hostname level names the
domain. Without one, kilter picks the best-covered well-known label scheme
(Topograph tiers, GKE, EKS, CoreWeave, OCI ...: ``UP_LEVEL_SCHEMES`` below).
Label values are not globally unique (a rack "r1" may exist in two blocks),
so a group is identified by its whole path from the coarsest level down.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kilter._native import gang
from kilter.model.annotations import BLOCK, SPINE, ZONE
from kilter.model.kueue import HOSTNAME_LABEL, Topology
from kilter.topology.catalog import Catalog, Platform

__all__ = ["HOSTNAME_LABEL", "UP_LEVEL_SCHEMES", "Levels", "choose_levels", "group_path"]

# Finest first; a scheme is used when its labels are on the fleet's nodes.
UP_LEVEL_SCHEMES: tuple[tuple[str, ...], ...] = (
    (BLOCK, SPINE, ZONE),
    (
        "fabric.topograph.run/tier-0",
        "fabric.topograph.run/tier-1",
        "fabric.topograph.run/tier-2",
        "fabric.topograph.run/tier-3",
    ),
    (
        "network.topology.nvidia.com/leaf",
        "network.topology.nvidia.com/spine",
        "network.topology.nvidia.com/core",
    ),
    ("network.topology.nvidia.com/block", "network.topology.nvidia.com/datacenter"),
    ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-cluster"),
    (
        "topology.k8s.aws/network-node-layer-4",
        "topology.k8s.aws/network-node-layer-3",
        "topology.k8s.aws/network-node-layer-2",
        "topology.k8s.aws/network-node-layer-1",
    ),
    (
        "backend.coreweave.cloud/leafgroup",
        "backend.coreweave.cloud/superpod",
        "backend.coreweave.cloud/fabric",
    ),
    ("oci.oraclecloud.com/host.network_block_id",),
)


@dataclass(frozen=True)
class Levels:
    """The fleet's topology levels as the planner numbers them.

    ``up_keys`` are the label keys above the scale-up domain, finest first;
    ``domain_key`` is a label the cluster's Topology uses for the domain when
    none of the platform's own domain labels is among its levels.
    """

    up_keys: tuple[str, ...] = ()
    domain_key: str | None = None
    source: str = "none"

    def domain_keys(self, platform: Platform) -> tuple[str, ...]:
        if not platform.is_multi_node:
            return ()
        extra = (self.domain_key,) if self.domain_key and self.domain_key not in platform.domain_label_keys else ()
        return (*platform.domain_label_keys, *extra)

    def domain_label(self, platform: Platform, labels: Mapping[str, str]) -> tuple[str, str] | None:
        """(key, value) of the label naming a node's scale-up domain: the first of ``domain_keys`` the node carries
        with a value. None on a single-node platform (a node is its own domain), and for a node of a multi-node
        platform without one: the fleet makes it a detached one-node domain, and Kueue or Volcano see it in no
        domain at all."""
        for key in self.domain_keys(platform):
            value = labels.get(key)
            if value:
                return key, value
        return None

    def carried_domain_key(self, platform: Platform, node_labels: Iterable[Mapping[str, str]]) -> str | None:
        """The domain label key these nodes of ``platform`` carry: the first of ``domain_keys`` that names some
        node's domain (``domain_label``), the one to ask Kueue's topology for; None when none names any."""
        named = {label[0] for labels in node_labels if (label := self.domain_label(platform, labels)) is not None}
        return next((k for k in self.domain_keys(platform) if k in named), None)

    def level_of(self, key: str, platform: Platform) -> int | None:
        """Planner level of a label key for nodes of ``platform``; None if it is not a level."""
        if key == HOSTNAME_LABEL:
            return int(gang.NODE)
        if key in self.domain_keys(platform):
            return int(gang.DOMAIN)
        if key in self.up_keys:
            return int(gang.UP) + self.up_keys.index(key)
        return None

    def describe(self, key: str) -> str:
        return key.rsplit("/", 1)[-1]

    def known(self, platform: Platform) -> list[str]:
        return [HOSTNAME_LABEL, *self.domain_keys(platform), *self.up_keys]


def _all_domain_keys(catalog: Catalog) -> set[str]:
    return {k for p in catalog.platforms for k in p.domain_label_keys}


def _from_topology(topology: Topology, catalog: Catalog) -> Levels:
    labels = [k for k in topology.level_labels if k != HOSTNAME_LABEL]
    domain_keys = _all_domain_keys(catalog)
    domain_key = None
    if labels and not any(k in domain_keys for k in labels):
        domain_key = labels[-1]
    up = tuple(k for k in reversed(labels) if k not in domain_keys and k != domain_key)
    return Levels(up_keys=up, domain_key=domain_key, source=f"Topology/{topology.metadata.name}")


def choose_levels(node_labels: Sequence[Mapping[str, str]], topologies: Iterable[Topology], catalog: Catalog) -> Levels:
    """The Topology whose top level labels the most nodes (ties: name), else the best label scheme."""
    topos = sorted(topologies, key=lambda t: t.metadata.name)
    best: tuple[int, Topology] | None = None
    for topo in topos:
        keys = [k for k in topo.level_labels if k != HOSTNAME_LABEL]
        covered = sum(1 for labels in node_labels if keys and all(k in labels for k in keys[:1]))
        if best is None or covered > best[0]:
            best = (covered, topo)
    if best is not None:
        return _from_topology(best[1], catalog)
    counts: Counter[int] = Counter()
    for labels in node_labels:
        for i, scheme in enumerate(UP_LEVEL_SCHEMES):
            if any(k in labels for k in scheme):
                counts[i] += 1
    if not counts:
        return Levels()
    index = min(counts, key=lambda i: (-counts[i], i))
    scheme = UP_LEVEL_SCHEMES[index]
    present = tuple(k for k in scheme if any(k in labels for labels in node_labels))
    return Levels(up_keys=present, source="labels: " + ", ".join(present))


def group_path(labels: Mapping[str, str], up_keys: Sequence[str], level: int) -> tuple[str, ...] | None:
    """The path naming a node's group at ``level`` (coarsest value first); None if a label is missing."""
    path = []
    for key in reversed(up_keys[level:]):
        value = labels.get(key)
        if not value:
            return None
        path.append(value)
    return tuple(path)
