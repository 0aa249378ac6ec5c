"""Views of the Kueue objects the topology side reads (v1beta1 and v1beta2).

Follows kubernetes-sigs/kueue ``apis/kueue/v1beta2/{topology,resourceflavor,
workload}_types.go``; the fields read here are spelled alike in v1beta1.
Quota objects (ClusterQueue, Cohort ...) arrive with the quota engine.
"""

from __future__ import annotations

import msgspec

from kilter.model.core_v1 import ObjectMeta, PodTemplateSpec

__all__ = [
    "KUEUE_GROUP",
    "PodSetTopologyRequest",
    "ResourceFlavor",
    "ResourceFlavorSpec",
    "Topology",
    "TopologyLevel",
    "TopologySpec",
    "Workload",
    "WorkloadPodSet",
    "WorkloadSpec",
]

KUEUE_GROUP = "kueue.x-k8s.io"
HOSTNAME_LABEL = "kubernetes.io/hostname"


class TopologyLevel(msgspec.Struct, rename="camel"):
    node_label: str


class TopologySpec(msgspec.Struct, rename="camel"):
    levels: list[TopologyLevel] = []


class Topology(msgspec.Struct, rename="camel"):
    """Ordered node-label levels, highest (coarsest) first; hostname may only be last."""

    api_version: str = f"{KUEUE_GROUP}/v1beta2"
    kind: str = "Topology"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: TopologySpec = msgspec.field(default_factory=TopologySpec)

    @property
    def level_labels(self) -> list[str]:
        return [level.node_label for level in self.spec.levels]


class ResourceFlavorSpec(msgspec.Struct, rename="camel"):
    node_labels: dict[str, str] = {}
    topology_name: str | None = None


class ResourceFlavor(msgspec.Struct, rename="camel"):
    api_version: str = f"{KUEUE_GROUP}/v1beta2"
    kind: str = "ResourceFlavor"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceFlavorSpec = msgspec.field(default_factory=ResourceFlavorSpec)


class PodSetTopologyRequest(msgspec.Struct, rename="camel"):
    required: str | None = None
    preferred: str | None = None
    unconstrained: bool | None = None
    pod_set_slice_required_topology: str | None = None
    pod_set_slice_size: int | None = None


class WorkloadPodSet(msgspec.Struct, rename="camel"):
    name: str = "main"
    count: int = 1
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    topology_request: PodSetTopologyRequest | None = None


class WorkloadSpec(msgspec.Struct, rename="camel"):
    pod_sets: list[WorkloadPodSet] = []
    queue_name: str = ""


class Workload(msgspec.Struct, rename="camel"):
    api_version: str = f"{KUEUE_GROUP}/v1beta2"
    kind: str = "Workload"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: WorkloadSpec = msgspec.field(default_factory=WorkloadSpec)
