"""Views of the Kueue objects the topology side reads (v1beta1 and v1beta2).

Follows kubernetes-sigs/kueue ``apis/kueue/v1beta2/{topology,resourceflavor,
workload}_types.go``; the fields read here are spelled alike in v1beta1.
ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass and the Workload
status follow ``{clusterqueue,cohort,localqueue,workload}_types.go``; where
v1beta1 spells a field differently (``spec.cohort``, v1alpha1 ``spec.parent``)
both spellings are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from kilter.model.core_v1 import ObjectMeta, PodTemplateSpec, Quantity

__all__ = [
    "KUEUE_GROUP",
    "Admission",
    "AdmissionCheckState",
    "ClusterQueue",
    "ClusterQueuePreemption",
    "ClusterQueueSpec",
    "Cohort",
    "CohortSpec",
    "Condition",
    "FairSharing",
    "FlavorQuotas",
    "LocalQueue",
    "PodSetAssignment",
    "PodSetTopologyRequest",
    "ResourceFlavor",
    "ResourceFlavorSpec",
    "ResourceGroup",
    "ResourceQuota",
    "Topology",
    "TopologyLevel",
    "TopologySpec",
    "Workload",
    "WorkloadPodSet",
    "WorkloadPriorityClass",
    "WorkloadSpec",
    "WorkloadStatus",
    "true_condition",
]

KUEUE_GROUP = "kueue.x-k8s.io"


def true_condition(status: Any, kind: str) -> Mapping[str, Any] | None:
    """The condition ``kind`` of a raw object's ``status`` when it is ``True``, else None: read without converting
    the object (a Workload's, a MultiKueueCluster's), whatever shape a bad object's status has."""
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for cond in conditions if isinstance(conditions, list) else ():
        if isinstance(cond, Mapping) and cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


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


class ResourceQuota(msgspec.Struct, rename="camel"):
    name: str
    nominal_quota: Quantity = 0
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(msgspec.Struct, rename="camel"):
    name: str
    resources: list[ResourceQuota] = []


class ResourceGroup(msgspec.Struct, rename="camel"):
    covered_resources: list[str] = []
    flavors: list[FlavorQuotas] = []


class FairSharing(msgspec.Struct, rename="camel"):
    weight: Quantity | None = None


class BorrowWithinCohort(msgspec.Struct, rename="camel"):
    policy: str = "Never"
    max_priority_threshold: int | None = None


class ClusterQueuePreemption(msgspec.Struct, rename="camel"):
    within_cluster_queue: str = "Never"
    reclaim_within_cohort: str = "Never"
    borrow_within_cohort: BorrowWithinCohort | None = None


class AdmissionScope(msgspec.Struct, rename="camel"):
    admission_mode: str = ""


class ClusterQueueSpec(msgspec.Struct, rename="camel"):
    cohort_name: str = ""
    cohort: str = ""
    resource_groups: list[ResourceGroup] = []
    fair_sharing: FairSharing | None = None
    preemption: ClusterQueuePreemption | None = None
    admission_scope: AdmissionScope | None = None
    stop_policy: str = ""

    @property
    def parent(self) -> str:
        """The cohort, as v1beta2 (``cohortName``) or v1beta1 (``cohort``) names it."""
        return self.cohort_name or self.cohort


class ClusterQueue(msgspec.Struct, rename="camel"):
    api_version: str = f"{KUEUE_GROUP}/v1beta2"
    kind: str = "ClusterQueue"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ClusterQueueSpec = msgspec.field(default_factory=ClusterQueueSpec)


class CohortSpec(msgspec.Struct, rename="camel"):
    parent_name: str = ""
    parent: str = ""
    resource_groups: list[ResourceGroup] = []
    fair_sharing: FairSharing | None = None

    @property
    def parent_cohort(self) -> str:
        """The parent, as v1beta1/v1beta2 (``parentName``) or v1alpha1 (``parent``) names it."""
        return self.parent_name or self.parent


class Cohort(msgspec.Struct, rename="camel"):
    api_version: str = f"{KUEUE_GROUP}/v1beta2"
    kind: str = "Cohort"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CohortSpec = msgspec.field(default_factory=CohortSpec)


class LocalQueueSpec(msgspec.Struct, rename="camel"):
    cluster_queue: str = ""
    fair_sharing: FairSharing | None = None


class AdmissionFairSharingStatus(msgspec.Struct, rename="camel"):
    consumed_resources: dict[str, Quantity] = {}
    last_update: str = ""


class LocalQueueFairSharingStatus(msgspec.Struct, rename="camel"):
    admission_fair_sharing_status: AdmissionFairSharingStatus | None = None


class LocalQueueStatus(msgspec.Struct, rename="camel"):
    fair_sharing: LocalQueueFairSharingStatus | None = None


class LocalQueue(msgspec.Struct, rename="camel"):
    api_version: str = f"{KUEUE_GROUP}/v1beta2"
    kind: str = "LocalQueue"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: LocalQueueSpec = msgspec.field(default_factory=LocalQueueSpec)
    status: LocalQueueStatus = msgspec.field(default_factory=LocalQueueStatus)


class WorkloadPriorityClass(msgspec.Struct, rename="camel"):
    api_version: str = f"{KUEUE_GROUP}/v1beta2"
    kind: str = "WorkloadPriorityClass"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    value: int = 0


class Condition(msgspec.Struct, rename="camel"):
    type: str
    status: str = "Unknown"
    last_transition_time: str = ""
    reason: str = ""


class PodSetAssignment(msgspec.Struct, rename="camel"):
    name: str = "main"
    flavors: dict[str, str] = {}
    resource_usage: dict[str, Quantity] = {}
    count: int | None = None


class Admission(msgspec.Struct, rename="camel"):
    cluster_queue: str = ""
    pod_set_assignments: list[PodSetAssignment] = []


class AdmissionCheckState(msgspec.Struct, rename="camel"):
    """One entry of ``Workload.status.admissionChecks`` (listType=map keyed by ``name``)."""

    name: str
    state: str = "Pending"
    last_transition_time: str = ""
    message: str = ""
    requeue_after_seconds: int | None = None
    retry_count: int | None = None
    pod_set_updates: list[dict[str, Any]] | None = None


class WorkloadStatus(msgspec.Struct, rename="camel"):
    admission: Admission | None = None
    conditions: list[Condition] = []
    admission_checks: list[AdmissionCheckState] = []

    def condition(self, kind: str) -> bool:
        return any(c.type == kind and c.status == "True" for c in self.conditions)

    def since(self, kind: str) -> str:
        """RFC 3339 time the condition last turned to its current state ('' if absent)."""
        return next((c.last_transition_time for c in self.conditions if c.type == kind), "")


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


class PriorityClassRef(msgspec.Struct, rename="camel"):
    group: str = ""
    kind: str = ""
    name: str = ""


class WorkloadSpec(msgspec.Struct, rename="camel"):
    pod_sets: list[WorkloadPodSet] = []
    queue_name: str = ""
    priority: int | None = None
    priority_class_name: str = ""
    priority_class_source: str = ""
    priority_class_ref: PriorityClassRef | None = None
    active: bool | None = None
    maximum_execution_time_seconds: int | None = None  # from the job's kueue.x-k8s.io/max-exec-time-seconds label


class Workload(msgspec.Struct, rename="camel"):
    api_version: str = f"{KUEUE_GROUP}/v1beta2"
    kind: str = "Workload"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: WorkloadSpec = msgspec.field(default_factory=WorkloadSpec)
    status: WorkloadStatus = msgspec.field(default_factory=WorkloadStatus)
