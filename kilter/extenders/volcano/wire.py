"""The Volcano scheduler ``extender`` plugin's wire types (``pkg/scheduler/plugins/extender``).

Request wrappers carry lowercase json tags (``task``, ``node``, ``evictees``);
the objects inside are Volcano's ``api`` structs, which have no tags and so
travel under their PascalCase Go field names — except the Kubernetes objects
inside them (``Pod``, ``Node``, and from v1.14 ``PodGroup`` and ``Queue``),
which keep their own camelCase tags; v1.13 sends PodGroup and Queue untagged
(``WirePodGroup``, ``WireQueue`` read both). Only the fields kilter reads are declared: the decoder skips
the rest without building them, which is what keeps a predicate call (a whole
TaskInfo and NodeInfo per task x node) cheap. Resources are Volcano's
``Resource``: ``MilliCPU``, ``Memory`` in bytes, and ``ScalarResources`` in
milli-units (1 GPU = 1000) except ``pods``.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from kilter.model.core_v1 import MAX_NAME, MAX_NAMESPACE, Name, NamespaceName, ObjectMeta, PodSpec, Quantity
from kilter.model.volcano import NetworkTopologySpec, PodGroup, PodGroupSpec, PodGroupStatus

__all__ = [
    "ABSTAIN",
    "PERMIT",
    "REJECT",
    "EvictArgs",
    "JobArgs",
    "JobInfo",
    "NodeName",
    "PredicateArgs",
    "PrioritizeArgs",
    "QueueArgs",
    "QueueInfo",
    "Resource",
    "SessionOpenArgs",
    "TaskArgs",
    "TaskHead",
    "TaskInfo",
    "TaskPod",
    "WirePodGroup",
    "WireQueue",
]

JobKey = Annotated[str, msgspec.Meta(max_length=MAX_NAMESPACE + 1 + MAX_NAME)]  # "namespace/podgroup"

PERMIT, ABSTAIN, REJECT = 1, 0, -1  # Volcano's util.Permit / Abstain / Reject

# api.TaskStatus bits (pkg/scheduler/api/types.go).
PENDING, ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING, RELEASING, SUCCEEDED, FAILED, UNKNOWN = (
    1 << i for i in range(10)
)
HOLDING = ALLOCATED | PIPELINED | BINDING | BOUND | RUNNING  # a task on a node, holding its resources
ENDED = RELEASING | SUCCEEDED | FAILED

# framework status codes a predicate answer may carry.
SUCCESS, ERROR, UNSCHEDULABLE, UNRESOLVABLE = 0, 1, 2, 3


class Resource(msgspec.Struct):
    milli_cpu: float = msgspec.field(name="MilliCPU", default=0.0)
    memory: float = msgspec.field(name="Memory", default=0.0)
    scalar_resources: dict[str, float] | None = msgspec.field(name="ScalarResources", default=None)


class TaskPod(msgspec.Struct, rename="camel"):
    """The slice of a task's v1.Pod kilter reads: who it is, and what the planner places it by."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


class TaskHead(msgspec.Struct):
    """A TaskInfo without its Pod: what booking, evicting, quota and scoring need of a task."""

    uid: str = msgspec.field(name="UID", default="")
    job: JobKey = msgspec.field(name="Job", default="")
    name: Name = msgspec.field(name="Name", default="")
    namespace: NamespaceName = msgspec.field(name="Namespace", default="")
    task_role: str = msgspec.field(name="TaskRole", default="")
    resreq: Resource | None = msgspec.field(name="Resreq", default=None)
    node_name: Name = msgspec.field(name="NodeName", default="")
    status: int = msgspec.field(name="Status", default=0)
    priority: int = msgspec.field(name="Priority", default=0)


class TaskInfo(TaskHead):
    """A TaskInfo with the slice of its Pod that placement reads (selectors, affinity, tolerations, containers)."""

    pod: TaskPod | None = msgspec.field(name="Pod", default=None)


class NodeName(msgspec.Struct):
    """A NodeInfo read for its name and Volcano's own idea of what is free on it."""

    name: Name = msgspec.field(name="Name", default="")
    idle: Resource | None = msgspec.field(name="Idle", default=None)


class _NetworkTopologyV113(msgspec.Struct):
    mode: str = msgspec.field(name="Mode", default="hard")
    highest_tier_allowed: int | None = msgspec.field(name="HighestTierAllowed", default=None)


class _PodGroupSpecV113(msgspec.Struct):
    min_member: int = msgspec.field(name="MinMember", default=0)
    queue: str = msgspec.field(name="Queue", default="")
    min_resources: dict[str, Quantity] | None = msgspec.field(name="MinResources", default=None)
    network_topology: _NetworkTopologyV113 | None = msgspec.field(name="NetworkTopology", default=None)


class _PodGroupStatusV113(msgspec.Struct):
    phase: str = msgspec.field(name="Phase", default="")


class WirePodGroup(msgspec.Struct):
    """``JobInfo.PodGroup`` in either shape Volcano sends.

    From v1.14 it is the v1beta1 object (``metadata``/``spec``/``status``);
    v1.13 marshals its internal type, which has no json tags: the ObjectMeta
    fields sit flattened at the top and ``Spec``/``Status`` are PascalCase.
    """

    metadata: ObjectMeta | None = None
    spec: PodGroupSpec | None = None
    status: PodGroupStatus | None = None
    name: Name = ""
    namespace: NamespaceName = ""
    uid: str = ""
    creation_timestamp: str | None = msgspec.field(name="creationTimestamp", default=None)
    annotations: dict[str, str] | None = None
    spec_v113: _PodGroupSpecV113 | None = msgspec.field(name="Spec", default=None)
    status_v113: _PodGroupStatusV113 | None = msgspec.field(name="Status", default=None)

    def normalized(self) -> PodGroup:
        if self.metadata is not None or self.spec is not None:
            return PodGroup(
                metadata=self.metadata or ObjectMeta(),
                spec=self.spec or PodGroupSpec(),
                status=self.status or PodGroupStatus(),
            )
        meta = ObjectMeta(
            name=self.name,
            namespace=self.namespace,
            uid=self.uid,
            creation_timestamp=self.creation_timestamp,
            annotations=self.annotations or {},
        )
        old = self.spec_v113 or _PodGroupSpecV113()
        topology = None
        if old.network_topology is not None:
            topology = NetworkTopologySpec(old.network_topology.mode, old.network_topology.highest_tier_allowed)
        spec = PodGroupSpec(
            min_member=old.min_member,
            queue=old.queue,
            min_resources=old.min_resources,
            network_topology=topology,
        )
        return PodGroup(
            metadata=meta, spec=spec, status=PodGroupStatus(phase=(self.status_v113 or _PodGroupStatusV113()).phase)
        )


class WireQueue(msgspec.Struct):
    """``QueueInfo.Queue``: the v1beta1 object from v1.14, flattened ObjectMeta on v1.13 (as ``WirePodGroup``)."""

    metadata: ObjectMeta | None = None
    name: Name = ""
    annotations: dict[str, str] | None = None

    @property
    def queue_name(self) -> str:
        return self.metadata.name if self.metadata is not None else self.name

    @property
    def queue_annotations(self) -> dict[str, str]:
        return self.metadata.annotations if self.metadata is not None else (self.annotations or {})


class JobInfo(msgspec.Struct):
    uid: str = msgspec.field(name="UID", default="")
    name: Name = msgspec.field(name="Name", default="")
    namespace: NamespaceName = msgspec.field(name="Namespace", default="")
    queue: Name = msgspec.field(name="Queue", default="")
    priority: int = msgspec.field(name="Priority", default=0)
    min_available: int = msgspec.field(name="MinAvailable", default=0)
    network_topology: NetworkTopologySpec | None = msgspec.field(name="NetworkTopology", default=None)
    tasks: dict[str, TaskInfo] | None = msgspec.field(name="Tasks", default=None)
    allocated: Resource | None = msgspec.field(name="Allocated", default=None)
    total_request: Resource | None = msgspec.field(name="TotalRequest", default=None)
    creation_timestamp: str | None = msgspec.field(name="CreationTimestamp", default=None)
    pod_group: WirePodGroup | None = msgspec.field(name="PodGroup", default=None)


class QueueInfo(msgspec.Struct):
    uid: str = msgspec.field(name="UID", default="")
    name: Name = msgspec.field(name="Name", default="")
    weight: int = msgspec.field(name="Weight", default=0)
    queue: WireQueue | None = msgspec.field(name="Queue", default=None)


class PredicateArgs(msgspec.Struct):
    task: TaskInfo | None = None
    node: NodeName | None = None


class PrioritizeArgs(msgspec.Struct):
    task: TaskHead | None = None
    nodes: list[NodeName] | None = None


class EvictArgs(msgspec.Struct):
    """preemptable and reclaimable: the evictees stay raw, since victims go back exactly as received."""

    evictor: TaskHead | None = None
    evictees: list[msgspec.Raw] | None = None


class JobArgs(msgspec.Struct):
    job: JobInfo | None = None


class QueueArgs(msgspec.Struct):
    queue: QueueInfo | None = None


class TaskArgs(msgspec.Struct):
    task: TaskHead | None = None


class SessionOpenArgs(msgspec.Struct):
    """onSessionOpen: Go marshals this wrapper without tags, so its keys are PascalCase too (Nodes unread)."""

    jobs: dict[str, JobInfo] | None = msgspec.field(name="Jobs", default=None)
    queues: dict[str, QueueInfo] | None = msgspec.field(name="Queues", default=None)
