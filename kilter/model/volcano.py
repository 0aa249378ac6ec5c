"""Views of the Volcano objects kilter reads: HyperNode, Queue, PodGroup.

Follows volcano-sh/apis ``pkg/apis/topology/v1alpha1/hypernode_types.go`` and
``pkg/apis/scheduling/v1beta1/types.go``; only the fields kilter reads are
declared, everything else is skipped by the decoder.
"""

from __future__ import annotations

import msgspec

from kilter.model.core_v1 import ObjectMeta, Quantity

__all__ = [
    "HYPERNODE_GROUP",
    "SCHEDULING_GROUP",
    "HyperNode",
    "HyperNodeMember",
    "LabelSelector",
    "LabelSelectorRequirement",
    "MemberSelector",
    "NetworkTopologySpec",
    "PodGroup",
    "Queue",
]

HYPERNODE_GROUP = "topology.volcano.sh"
SCHEDULING_GROUP = "scheduling.volcano.sh"


class LabelSelectorRequirement(msgspec.Struct, rename="camel"):
    key: str
    operator: str
    values: list[str] = []


class LabelSelector(msgspec.Struct, rename="camel"):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


class ExactMatch(msgspec.Struct, rename="camel"):
    name: str = ""


class RegexMatch(msgspec.Struct, rename="camel"):
    pattern: str = ""


class MemberSelector(msgspec.Struct, rename="camel"):
    """Exactly one of the three is set (the CRD's CEL rule)."""

    exact_match: ExactMatch | None = None
    regex_match: RegexMatch | None = None
    label_match: LabelSelector | None = None


class HyperNodeMember(msgspec.Struct, rename="camel"):
    type: str = "Node"
    selector: MemberSelector = msgspec.field(default_factory=MemberSelector)


class HyperNodeSpec(msgspec.Struct, rename="camel"):
    tier: int = 0
    tier_name: str = ""
    members: list[HyperNodeMember] = []


class HyperNode(msgspec.Struct, rename="camel"):
    """A network-topology group of Nodes or of other HyperNodes; a lower tier is closer."""

    api_version: str = f"{HYPERNODE_GROUP}/v1alpha1"
    kind: str = "HyperNode"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: HyperNodeSpec = msgspec.field(default_factory=HyperNodeSpec)


class NetworkTopologySpec(msgspec.Struct, rename="camel"):
    """How far apart a job's pods may land: ``hard`` confines them, ``soft`` only prefers."""

    mode: str = "hard"
    highest_tier_allowed: int | None = None
    highest_tier_name: str = ""


class QueueSpec(msgspec.Struct, rename="camel"):
    weight: int = 1
    capability: dict[str, Quantity] = {}
    parent: str = ""


class Queue(msgspec.Struct, rename="camel"):
    api_version: str = f"{SCHEDULING_GROUP}/v1beta1"
    kind: str = "Queue"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: QueueSpec = msgspec.field(default_factory=QueueSpec)


class PodGroupSpec(msgspec.Struct, rename="camel"):
    min_member: int = 0
    queue: str = "default"
    priority_class_name: str = ""
    min_resources: dict[str, Quantity] | None = None
    network_topology: NetworkTopologySpec | None = None


class PodGroupStatus(msgspec.Struct, rename="camel"):
    phase: str = ""
    running: int = 0


class PodGroup(msgspec.Struct, rename="camel"):
    api_version: str = f"{SCHEDULING_GROUP}/v1beta1"
    kind: str = "PodGroup"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodGroupSpec = msgspec.field(default_factory=PodGroupSpec)
    status: PodGroupStatus = msgspec.field(default_factory=PodGroupStatus)
