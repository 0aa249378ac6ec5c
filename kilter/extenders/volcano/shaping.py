"""Volcano jobs as kilter's gangs: a PodGroup's pending tasks shaped into a ``GangId`` the gang book plans.

A job (PodGroup ``minMember`` > 1) is a gang while it still misses members:
its first ``minMember`` - (tasks holding a node) pending GPU tasks, in
(role, name) order, grouped by role and GPU shape into pod sets. A job some
of whose GPU tasks hold nodes already (a running gang whose failed pods
were replaced) is shaped whole, its holding tasks as placed members, so the
gang book repairs it beside them rather than planning the rest afresh. Its
``networkTopology`` becomes a topology level, the highest HyperNode tier it
allows (``network_request``). The job comes from the open session, else
from its PodGroup and pods in the cluster state (``state_job``). Its gang key
is ``kilter.gangs.GangKey`` over the PodGroup, so plan records and the other
front doors name the same gang. ``GangShapes`` works each job's gang out
once per session and state version.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import msgspec

from kilter.extenders.volcano import wire as vw
from kilter.extenders.volcano.session import Session
from kilter.gangs import GangId, GangKey
from kilter.model.core_v1 import Container, Pod, PodTemplateSpec, ResourceRequirements
from kilter.model.errors import InputError
from kilter.model.jobs import PodSetSpec, TopologyRequest
from kilter.model.jobs import topology_request as template_topology
from kilter.model.volcano import NetworkTopologySpec
from kilter.state.cluster import ClusterState
from kilter.state.store import ClusterStore
from kilter.topology import pod_gpus, verdicts
from kilter.topology.fleet import Fleet
from kilter.topology.hypernodes import TIER_LABEL_PREFIX, tier_label
from kilter.topology.plan import MAX_POD_GPUS

__all__ = [
    "GROUP_ANNOTATION",
    "GangShapes",
    "gang_key",
    "lowest_hypernode",
    "make_gang",
    "network_request",
    "pod_sets",
    "state_job",
    "task_gpus",
    "task_pod",
]

GROUP_ANNOTATION = "scheduling.k8s.io/group-name"

Shape = tuple[GangId | None, frozenset[str]]  # the job's gang (None: not a gang now) and its pending members' uids


class GangShapes:
    """The gang of each job, worked out once per (session serial, state version, state generation)."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self._epoch: tuple[int, int, int] = (-1, -1, -1)
        self._shapes: dict[str, Shape] = {}

    def gang(self, job: str, fleet: Fleet, session: Session | None) -> Shape:
        epoch = (session.serial if session else 0, self.store.version, self.store.generation)
        if self._epoch != epoch:
            self._epoch = epoch
            self._shapes.clear()
        shape = self._shapes.get(job)
        if shape is None:
            info = session.jobs.get(job) if session else None
            if info is None:
                info = state_job(self.store.state(), fleet, job)
            shape = self._shapes[job] = make_gang(job, info, fleet, state=self.store.state)
        return shape


def gang_key(job: str) -> str:
    """The gang key of a Volcano job (``NAMESPACE/PODGROUP``, as Volcano's session names it)."""
    namespace, _, name = job.partition("/")
    return GangKey(namespace, "podgroup", (name,)).format()


def task_gpus(task: vw.TaskHead | None, fleet: Fleet) -> tuple[str, int]:
    """The task's device resource and GPU count (whole GPUs from Volcano's milli-units); ("", 0) for none."""
    if task is None:
        raise InputError("task is null")
    scalars = task.resreq.scalar_resources if task.resreq is not None else None
    devices = fleet.catalog.device_resources
    asked = verdicts.gpu_ask(((r, v) for r, v in (scalars or {}).items() if r in devices), who="the task")
    if asked is None:
        return "", 0
    resource, milli = asked
    if milli > MAX_POD_GPUS * 1000:  # the gang planner's rule, for every task: no node holds it, nor does an int32
        whole = int(milli) // 1000 if math.isfinite(milli) else milli
        raise InputError(f"the task asks for {whole} {resource}; no node offers more than {MAX_POD_GPUS}")
    if milli % 1000:
        raise InputError(f"the task asks for {milli / 1000:g} {resource}; kilter places whole GPUs")
    return resource, int(milli // 1000)


def task_pod(task: vw.TaskHead) -> Pod:
    """The task's Pod as Volcano sent it (an empty one when it sent none)."""
    pod = getattr(task, "pod", None) or vw.TaskPod()
    return Pod(metadata=pod.metadata, spec=pod.spec)


def make_gang(job: str, info: vw.JobInfo | None, fleet: Fleet, *, state: Callable[[], ClusterState]) -> Shape:
    """The gang the job's pending GPU tasks form now; (None, empty) when it is no gang or misses nobody.

    ``state`` is read only for a gang with a networkTopology's tier names to resolve, or about to be one.
    """
    if info is None:
        return None, frozenset()
    group = info.pod_group.normalized() if info.pod_group is not None else None
    minimum = info.min_available or (group.spec.min_member if group is not None else 0)
    tasks = list((info.tasks or {}).values())
    need = minimum - sum(1 for t in tasks if t.status & vw.HOLDING)
    if minimum < 2 or need <= 0:
        return None, frozenset()
    pending = sorted(
        (t for t in tasks if t.status & vw.PENDING and task_gpus(t, fleet)[1] > 0),
        key=lambda t: (t.task_role, t.name),
    )[:need]
    topology = info.network_topology or (group.spec.network_topology if group is not None else None)
    tier_names = {hn.spec.tier_name: hn.spec.tier for hn in state().hypernodes if hn.spec.tier_name}
    request = network_request(topology, fleet, tier_names)
    sets = pod_sets(pending, request, fleet)
    if not sets:
        return None, frozenset()
    uids = frozenset(t.uid for t in pending)
    holding = sorted(
        (t for t in tasks if t.status & vw.HOLDING and t.node_name and task_gpus(t, fleet)[1] > 0),
        key=lambda t: (t.task_role, t.name),
    )
    if holding:  # a running gang short of members: its replacements go beside these (``gangs.repairs``)
        whole = pod_sets([*holding, *pending], request, fleet)
        members = tuple(_placed_pod(t) for t in (*holding, *pending))
        size = len(holding) + len(pending)
        return GangId(gang_key(job), "volcano", size, whole, placed=len(holding), members=members), uids
    return GangId(gang_key(job), "volcano", need, sets, placed=0), uids


def _placed_pod(task: vw.TaskInfo) -> Pod:
    """The task's Pod, on the node the session has it on (a task allocated this session has no nodeName yet)."""
    pod = task_pod(task)
    if task.node_name and pod.spec.node_name != task.node_name:
        return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=task.node_name))
    return pod


def state_job(state: ClusterState, fleet: Fleet, job: str) -> vw.JobInfo | None:
    """The job as the cluster state shows it: its PodGroup, and its pods as tasks."""
    namespace, _, name = job.partition("/")
    group = next((g for g in state.pod_groups if g.metadata.namespace == namespace and g.metadata.name == name), None)
    if group is None:
        return None
    tasks: dict[str, vw.TaskInfo] = {}
    for pod in state.pods:
        meta = pod.metadata
        if meta.namespace != namespace or meta.annotations.get(GROUP_ANNOTATION) != name:
            continue
        if pod.status.phase in ("Succeeded", "Failed"):
            continue
        scalars = {}
        for r in fleet.catalog.device_resources:
            n = pod_gpus.count(pod.spec, r, path=f"Pod {namespace}/{meta.name}: spec")
            if isinstance(n, pod_gpus.Unreadable):
                raise n.error()  # the job asked about: a member nobody can count makes it bad input
            if n:
                scalars[r] = float(n * 1000)
        uid = meta.uid or f"{namespace}/{meta.name}"
        tasks[uid] = vw.TaskInfo(
            uid=uid,
            job=job,
            name=meta.name,
            namespace=namespace,
            resreq=vw.Resource(scalar_resources=scalars),
            node_name=pod.spec.node_name,
            status=vw.BOUND if pod.spec.node_name else vw.PENDING,
            pod=vw.TaskPod(meta, pod.spec),
        )
    return vw.JobInfo(
        uid=group.metadata.uid,
        name=name,
        namespace=namespace,
        queue=group.spec.queue,
        min_available=group.spec.min_member,
        network_topology=group.spec.network_topology,
        tasks=tasks,
        pod_group=vw.WirePodGroup(metadata=group.metadata, spec=group.spec, status=group.status),
    )


def pod_sets(pending: Sequence[vw.TaskInfo], topology: TopologyRequest | None, fleet: Fleet) -> tuple[PodSetSpec, ...]:
    """Pending tasks grouped by role and GPU shape, each group one pod set of the gang."""
    groups: dict[tuple[str, str, int], list[vw.TaskInfo]] = {}
    for t in pending:
        resource, gpus = task_gpus(t, fleet)
        groups.setdefault((t.task_role or "tasks", resource, gpus), []).append(t)
    out = []
    for (role, resource, gpus), tasks in groups.items():
        pod = tasks[0].pod or vw.TaskPod()
        spec = pod.spec
        if pod_gpus.count(spec, resource, path="$.Pod.spec") != gpus:
            asks = ResourceRequirements(requests={resource: gpus}, limits={resource: gpus})
            spec = msgspec.structs.replace(spec, containers=(Container("task", asks),), init_containers=())
        template = PodTemplateSpec(metadata=pod.metadata, spec=spec)
        request = topology or template_topology(template, len(tasks), path=f"$.task[{tasks[0].name}].Pod")
        out.append(PodSetSpec(f"{role}-{gpus}", len(tasks), template, request))
    return tuple(out)


def network_request(
    spec: NetworkTopologySpec | None, fleet: Fleet, tier_names: Mapping[str, int]
) -> TopologyRequest | None:
    """A PodGroup's networkTopology as a topology level: the highest HyperNode tier it allows."""
    if spec is None or (spec.highest_tier_allowed is None and not spec.highest_tier_name):
        return None
    if spec.highest_tier_name:
        if spec.highest_tier_name not in tier_names:
            raise InputError(f"networkTopology.highestTierName {spec.highest_tier_name!r} names no HyperNode tier")
        limit = tier_names[spec.highest_tier_name]
    else:
        assert spec.highest_tier_allowed is not None
        limit = spec.highest_tier_allowed
    tiers = sorted(int(k[len(TIER_LABEL_PREFIX) :]) for k in fleet.levels.up_keys if k.startswith(TIER_LABEL_PREFIX))
    allowed = [t for t in tiers if t <= limit]
    if not allowed:
        raise InputError(
            f"networkTopology allows tiers up to {limit}; the fleet's HyperNode tiers are {tiers or 'none'}"
        )
    key = tier_label(allowed[-1])
    return TopologyRequest(required=key) if spec.mode != "soft" else TopologyRequest(preferred=key)


def lowest_hypernode(fleet: Fleet, nodes: Sequence[int]) -> str | None:
    """The lowest-tier HyperNode holding every one of ``nodes`` (Volcano's job-allocated-hypernode)."""
    if not len(nodes):
        return None
    tiers = sorted(
        (int(k[len(TIER_LABEL_PREFIX) :]), k) for k in fleet.levels.up_keys if k.startswith(TIER_LABEL_PREFIX)
    )
    for _, key in tiers:
        values = {fleet.node_labels[n].get(key) for n in nodes}
        if len(values) == 1 and None not in values:
            return values.pop()
    return None
