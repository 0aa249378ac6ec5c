"""The cluster state the commands and servers read, built from a snapshot.

Holds typed Nodes, Pods, Kueue and Volcano objects and the fleet model built
from them. A later feeder (list/watch of a live cluster) produces the same
objects, so everything downstream is written once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kilter.model import codec
from kilter.model.core_v1 import Node, Pod
from kilter.model.kueue import (
    ClusterQueue,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Topology,
    Workload,
    WorkloadPriorityClass,
)
from kilter.model.nvidia_dra import COMPUTE_DOMAIN_GROUP, COMPUTE_DOMAIN_KIND, ComputeDomain
from kilter.model.volcano import HYPERNODE_GROUP, SCHEDULING_GROUP, HyperNode, PodGroup, Queue
from kilter.state import snapshot, snapshot_file
from kilter.state.events import TYPED_KINDS
from kilter.topology import spare_settings
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.fleet import Fleet, build_fleet
from kilter.topology.health import DEFAULTS, HealthSignals

__all__ = ["KNOWN_KINDS", "NODES_AND_PODS", "TYPES", "ClusterState", "from_objects", "load", "state_of"]

KUEUE = "kueue.x-k8s.io"
KNOWN_KINDS: set[tuple[str, str]] = {
    ("", "Node"),
    ("", "Pod"),
    (KUEUE, "Topology"),
    (KUEUE, "ResourceFlavor"),
    (KUEUE, "ClusterQueue"),
    (KUEUE, "Cohort"),
    (KUEUE, "LocalQueue"),
    (KUEUE, "Workload"),
    (KUEUE, "WorkloadPriorityClass"),
    (KUEUE, "AdmissionCheck"),
    ("scheduling.volcano.sh", "Queue"),
    ("scheduling.volcano.sh", "PodGroup"),
    ("topology.volcano.sh", "HyperNode"),
    ("scheduling.k8s.io", "PriorityClass"),
    (COMPUTE_DOMAIN_GROUP, COMPUTE_DOMAIN_KIND),
}

NODES_AND_PODS: frozenset[tuple[str, str]] = frozenset({("", "Node"), ("", "Pod")})
"""What a view of the quota objects alone (ClusterQueues, Cohorts, Workloads ...) can ``skip`` when it loads."""

# ClusterState's typed lists: field -> ((API group, kind), typed view)
TYPES: dict[str, tuple[tuple[str, str], type[Any]]] = {
    "nodes": (("", "Node"), Node),
    "pods": (("", "Pod"), Pod),
    "topologies": ((KUEUE, "Topology"), Topology),
    "flavors": ((KUEUE, "ResourceFlavor"), ResourceFlavor),
    "cluster_queues": ((KUEUE, "ClusterQueue"), ClusterQueue),
    "cohorts": ((KUEUE, "Cohort"), Cohort),
    "local_queues": ((KUEUE, "LocalQueue"), LocalQueue),
    "workloads": ((KUEUE, "Workload"), Workload),
    "priority_classes": ((KUEUE, "WorkloadPriorityClass"), WorkloadPriorityClass),
    "hypernodes": ((HYPERNODE_GROUP, "HyperNode"), HyperNode),
    "volcano_queues": ((SCHEDULING_GROUP, "Queue"), Queue),
    "pod_groups": ((SCHEDULING_GROUP, "PodGroup"), PodGroup),
    "compute_domains": ((COMPUTE_DOMAIN_GROUP, COMPUTE_DOMAIN_KIND), ComputeDomain),
}


@dataclass
class ClusterState:
    nodes: list[Node]
    pods: list[Pod]
    topologies: list[Topology]
    flavors: list[ResourceFlavor]
    catalog: Catalog
    cluster_queues: list[ClusterQueue] = field(default_factory=list)
    cohorts: list[Cohort] = field(default_factory=list)
    local_queues: list[LocalQueue] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    priority_classes: list[WorkloadPriorityClass] = field(default_factory=list)
    hypernodes: list[HyperNode] = field(default_factory=list)
    volcano_queues: list[Queue] = field(default_factory=list)
    pod_groups: list[PodGroup] = field(default_factory=list)
    compute_domains: list[ComputeDomain] = field(default_factory=list)
    raw: snapshot.RawObjects = field(default_factory=snapshot.RawObjects)
    health: HealthSignals = DEFAULTS  # what, beyond the built-in rules, makes a node unusable (``--health-signals``)
    skipped: frozenset[tuple[str, str]] = field(default=frozenset(), init=False)  # kinds ``load`` left unread
    spare_nodes_default: int = field(default=0, init=False)  # --spare-nodes-per-domain, set before fleet()
    spares_lent_default: bool = field(default=False, init=False)  # --spares-for-preemptible, set before fleet()
    spare_problems: tuple[str, ...] = field(default=(), init=False)  # spare settings skipped (``spare_settings``)
    _fleet: Fleet | None = field(default=None, init=False, repr=False)
    _idle: Fleet | None = field(default=None, init=False, repr=False)

    def fleet(self) -> Fleet:
        """The fleet model of the current objects, built on first use."""
        self._check_nodes_read()
        if self._fleet is None:
            self._fleet = build_fleet(
                self.nodes,
                self.pods,
                catalog=self.catalog,
                topologies=self.topologies,
                hypernodes=self.hypernodes,
                health=self.health,
            )
            self.spare_problems = self.hold_spares(self._fleet)
        return self._fleet

    def idle_fleet(self) -> Fleet:
        """The same fleet with nothing running: what the cluster could ever offer new plans (spares held)."""
        self._check_nodes_read()
        if self._idle is None:
            self._idle = build_fleet(
                self.nodes,
                (),
                catalog=self.catalog,
                topologies=self.topologies,
                hypernodes=self.hypernodes,
                health=self.health,
            )
            self.hold_spares(self._idle)
        return self._idle

    def hold_spares(self, fleet: Fleet) -> tuple[str, ...]:
        """Set ``fleet``'s spare counts from this state's ResourceFlavors, ClusterQueues and Cohorts and
        ``spare_nodes_default`` and ``spares_lent_default`` (``topology.spare_settings``); the settings skipped, one
        line each."""
        return spare_settings.apply(
            fleet,
            flavors=self.flavors,
            cluster_queues=self.cluster_queues,
            cohorts=self.cohorts,
            default=self.spare_nodes_default,
            lend_default=self.spares_lent_default,
        )

    def _check_nodes_read(self) -> None:
        """A fleet of a state loaded without its Nodes or Pods would be empty or idle: a bug of the caller."""
        if self.skipped & NODES_AND_PODS:
            raise RuntimeError("this state was loaded without Nodes or Pods (skip): it has no fleet")

    @property
    def warnings(self) -> list[str]:
        notes = [f"ignored {n} {kind} object(s)" for kind, n in sorted(self.raw.unknown.items())]
        return notes + (self._fleet.warnings if self._fleet else []) + list(self.spare_problems)


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else "?"


def from_objects(
    docs: Iterable[Any], *, catalog: Catalog | None = None, health: HealthSignals = DEFAULTS
) -> ClusterState:
    """The state of these objects: parsed documents, or Nodes and Pods already typed (as a live list gives them)."""
    docs = list(docs)
    typed = [d for d in docs if isinstance(d, Node | Pod)]
    raw = snapshot.group_objects([d for d in docs if not isinstance(d, Node | Pod)], KNOWN_KINDS)
    return state_of(typed, raw, catalog=catalog, health=health)


def load(
    path: Path,
    *,
    catalog: Catalog | None = None,
    skip: frozenset[tuple[str, str]] = frozenset(),
    health: HealthSignals = DEFAULTS,
) -> ClusterState:
    """The state a snapshot file describes (JSON decoded straight into typed Nodes and Pods, YAML parsed).

    ``skip``: kinds the caller does not read (``NODES_AND_PODS`` for a view of quota objects alone: from a
    150,000-pod JSON snapshot they are most of the time of a load). They are left out of the state, which
    then refuses to build a fleet without its Nodes.
    """
    typed, raw = snapshot_file.read(path, KNOWN_KINDS, skip=skip)
    state = state_of(typed, raw, catalog=catalog, health=health)
    state.skipped = skip
    return state


def state_of(
    typed: list[Node | Pod],
    raw: snapshot.RawObjects,
    *,
    catalog: Catalog | None = None,
    health: HealthSignals = DEFAULTS,
) -> ClusterState:
    """The state of objects already read (``snapshot_file.read``): Nodes and Pods typed, the rest as received.

    Each object kept as received is typed here; only what has no typed view stays as received (a Node or Pod
    dict of a YAML file does not: 150,000 Pod dicts beside their views would double the memory for nothing).
    """
    lists: dict[str, list[Any]] = {}
    by_type: dict[type[Any], list[Node | Pod]] = {Node: [], Pod: []}
    for obj in typed:
        by_type[Pod if isinstance(obj, Pod) else Node].append(obj)
    for name, ((group, kind), cls) in TYPES.items():
        lists[name] = by_type.get(cls, []) + [
            codec.convert(obj, cls, path=f"{kind} {_name(obj)}") for obj in raw.of(group, kind)
        ]
    for typed_kind in TYPED_KINDS:
        raw.by_kind.pop(typed_kind, None)
    return ClusterState(catalog=catalog or Catalog(BUILTIN), raw=raw, health=health, **lists)
