"""Views of core/v1 Node and Pod: only the fields kilter reads.

Field names follow the Go json tags of k8s.io/api/core/v1 (camelCase via
``rename="camel"``). Unknown fields are ignored, as upstream objects gain
fields every release.

A live store holds one of these per pod for hundreds of thousands of pods, so
they are built to cost the cyclic collector nothing: the structs are untracked
(``gc=False``; they never form cycles) and repeated fields are tuples, which
the collector stops tracking once it has seen they hold nothing it tracks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import msgspec

from kilter.model import quantity

__all__ = [
    "MAX_NAME",
    "MAX_NAMESPACE",
    "Affinity",
    "Container",
    "Name",
    "NamespaceName",
    "Node",
    "NodeAffinity",
    "NodeCondition",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeSpec",
    "NodeStatus",
    "ObjectMeta",
    "OwnerReference",
    "Pod",
    "PodResourceClaim",
    "PodSpec",
    "PodStatus",
    "PodTemplateSpec",
    "Quantity",
    "ResourceRequirements",
    "Taint",
    "Toleration",
    "pod_request",
]

Quantity = str | int | float

MAX_NAME = 253
"""The longest object name the API server accepts (a DNS-1123 subdomain: Pods, Nodes, PodGroups)."""
MAX_NAMESPACE = 63
"""The longest namespace name (a DNS-1123 label)."""
Name = Annotated[str, msgspec.Meta(max_length=MAX_NAME)]
"""A name as decoded from a request or the API: longer ones are refused at decoding, so that no store keeps (and
no caller can make kilter keep) a name no object can have."""
NamespaceName = Annotated[str, msgspec.Meta(max_length=MAX_NAMESPACE)]


class OwnerReference(msgspec.Struct, rename="camel", gc=False):
    """``metav1.OwnerReference``: an object this one belongs to, in its namespace; ``controller`` marks the one
    that manages it (at most one per object: a Job of its pods, a ReplicaSet of its pods). ``controller`` is a
    ``*bool`` upstream, so absent is None, not False. Gang membership is checked against it (``gangs.owners``)."""

    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(msgspec.Struct, rename="camel", gc=False):
    name: Name = ""
    namespace: NamespaceName = ""
    uid: str = ""
    resource_version: str = ""
    creation_timestamp: str | None = None  # metav1.Time marshals a zero time as null
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: tuple[OwnerReference, ...] = ()

    @property
    def controller(self) -> OwnerReference | None:
        """The owner that manages the object (``controller: true``), if any."""
        for ref in self.owner_references:
            if ref.controller:
                return ref
        return None


class Taint(msgspec.Struct, rename="camel", gc=False):
    key: str
    value: str = ""
    effect: str = ""


class NodeSpec(msgspec.Struct, rename="camel", gc=False):
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()


class NodeCondition(msgspec.Struct, rename="camel", gc=False):
    type: str
    status: str = "Unknown"


class NodeStatus(msgspec.Struct, rename="camel", gc=False):
    capacity: dict[str, Quantity] = {}
    allocatable: dict[str, Quantity] = {}
    conditions: tuple[NodeCondition, ...] = ()


class Node(msgspec.Struct, rename="camel", gc=False):
    api_version: str = "v1"
    kind: str = "Node"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class ResourceRequirements(msgspec.Struct, rename="camel", gc=False):
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}


class Container(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)


class Toleration(msgspec.Struct, rename="camel", gc=False):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class NodeSelectorRequirement(msgspec.Struct, rename="camel", gc=False):
    key: str
    operator: str
    values: tuple[str, ...] = ()


class NodeSelectorTerm(msgspec.Struct, rename="camel", gc=False):
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class NodeSelector(msgspec.Struct, rename="camel", gc=False):
    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()


class NodeAffinity(msgspec.Struct, rename="camel", gc=False):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(msgspec.Struct, rename="camel", gc=False):
    node_affinity: NodeAffinity | None = None


class PodResourceClaim(msgspec.Struct, rename="camel", gc=False):
    """``v1.PodResourceClaim``: a DRA claim the pod uses, by its own ``name``; at most one of the two sources is
    set (both ``*string``, omitempty): an existing ResourceClaim, or a ResourceClaimTemplate the pod's claim is
    made from (how a pod joins a ComputeDomain)."""

    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodSpec(msgspec.Struct, rename="camel", gc=False):
    node_name: str = ""
    scheduler_name: str = ""
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    overhead: dict[str, Quantity] = {}
    active_deadline_seconds: int | None = None  # the pod's own limit on its run, seconds (an expected runtime)
    resource_claims: tuple[PodResourceClaim, ...] = ()
    priority: int | None = None  # from the pod's PriorityClass (the Priority admission plugin): who repairs first
    preemption_policy: str | None = None  # "Never": the scheduler preempts nothing for this pod


class PodStatus(msgspec.Struct, rename="camel", gc=False):
    phase: str = ""
    start_time: str | None = None  # when the kubelet accepted the pod (RFC 3339)


class Pod(msgspec.Struct, rename="camel", gc=False):
    api_version: str = "v1"
    kind: str = "Pod"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class PodTemplateSpec(msgspec.Struct, rename="camel", gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


Convert = Callable[[Quantity, str], int]  # (quantity, JSON path) -> units


def _to_count(value: Quantity, path: str) -> int:
    return quantity.to_count(value, path=path)


def pod_request(spec: PodSpec, resource: str, *, path: str = "$.spec", convert: Convert = _to_count) -> int:
    """Units of ``resource`` the pod needs, as the kubelet counts them.

    max(sum over app containers, max over init containers) plus overhead; a
    limit without a request counts as the request (extended resources cannot
    be overcommitted). ``convert`` turns each quantity into units: whole
    device counts by default; the quota engine passes Kueue's canonical units.
    """

    app = init = 0
    for i, c in enumerate(spec.containers):
        raw = _asked(c, resource)
        if raw is not None:
            app += convert(raw, f"{path}.containers[{i}].resources")
    for i, c in enumerate(spec.init_containers):
        raw = _asked(c, resource)
        if raw is not None:
            init = max(init, convert(raw, f"{path}.initContainers[{i}].resources"))
    extra = spec.overhead.get(resource)
    return max(app, init) + (convert(extra, f"{path}.overhead") if extra is not None else 0)


def _asked(c: Container, resource: str) -> Quantity | None:
    """The container's request for ``resource``, else its limit (which then counts as the request)."""
    raw = c.resources.requests.get(resource)
    return c.resources.limits.get(resource) if raw is None else raw
