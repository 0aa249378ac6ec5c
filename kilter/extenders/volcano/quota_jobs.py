"""Volcano jobs and queues as ``quota.bound_queues`` reads them: adapters from Volcano's wire and the state.

A Volcano job (a PodGroup) becomes a ``BoundJob``: from the session's
``JobInfo`` (``job_from_info``) or, when no session told kilter more, from
the PodGroups and their pods in the state (``jobs_from_state``). Volcano's
``Resource`` amounts (milli-CPU, bytes, scalars in milli-units) become
Kueue's canonical units (``from_resource``). ClusterQueue and Cohort
definitions come from the state (Kueue's CRDs in the cluster or the
snapshot) and from ``--queues FILE``, whose objects win by name
(``build_view``); a Queue's annotations come from the session or the state
(``queue_annotations``). What is charged and decided is
``kilter.quota.bound_jobs``'s and ``bound_queues``'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from kilter.extenders.volcano import wire as vw
from kilter.model.core_v1 import Quantity
from kilter.model.errors import InputError
from kilter.model.kueue import ClusterQueue, Cohort, ResourceFlavor
from kilter.model.volcano import PodGroup
from kilter.quota import amount
from kilter.quota.bound_jobs import BoundJob, FlavorLabels, plus
from kilter.quota.bound_queues import CLUSTER_QUEUE_ANNOTATION, BoundQueues, bind_queues
from kilter.quota.config import FairSharingConfig
from kilter.quota.policy import parse_time
from kilter.quota.tree import build_tree
from kilter.quota.usage import pod_amount
from kilter.state.cluster import ClusterState

__all__ = [
    "CLUSTER_QUEUE_ANNOTATION",
    "build_view",
    "from_resource",
    "job_from_info",
    "jobs_from_state",
    "named_job",
    "queue_annotations",
    "queue_name",
]

PODS = "pods"


def from_resource(res: vw.Resource | None) -> dict[str, int]:
    """Volcano's ``Resource`` in canonical units: milli-CPU, bytes, scalars back from milli-units."""
    if res is None:
        return {}
    out: dict[str, int] = {}
    for name, value in (("cpu", res.milli_cpu), ("memory", res.memory)):
        if not math.isfinite(value) or value < 0:
            raise InputError(f"Resource {name} is {value}")
        if value > 0:
            out[name] = math.ceil(value)
    for name, value in (res.scalar_resources or {}).items():
        if not math.isfinite(value) or value < 0:
            raise InputError(f"Resource {name} is {value}")
        count = value if name == PODS else value / 1000
        if count > 0:
            out[name] = math.ceil(count - 1e-9)
    return out


def _from_list(resources: Mapping[str, Quantity] | None, path: str) -> dict[str, int]:
    return {r: v for r, q in (resources or {}).items() if (v := amount.from_quantity(r, q, path=f"{path}[{r}]")) > 0}


def _time(text: str | None) -> float:
    try:
        return parse_time(text, path="$") if text else 0.0
    except InputError:
        return 0.0


def job_from_info(info: vw.JobInfo) -> BoundJob:
    """A job from the session's JobInfo."""
    tasks = list((info.tasks or {}).values())
    holding_tasks = [t for t in tasks if t.status & vw.HOLDING]
    if info.allocated is not None:
        holding = from_resource(info.allocated)
    else:
        holding = {}
        for t in holding_tasks:
            holding = plus(holding, from_resource(t.resreq))
    pg = info.pod_group.normalized() if info.pod_group is not None else None
    minimum = _from_list(pg.spec.min_resources, "$.PodGroup.spec.minResources") if pg is not None else {}
    reserves = bool(minimum)
    if not minimum:
        minimum = from_resource(info.total_request)
        if not minimum:
            for t in tasks:
                if not t.status & vw.ENDED:
                    minimum = plus(minimum, from_resource(t.resreq))
    return BoundJob(
        key=f"{info.namespace}/{info.name}",
        uid=info.uid,
        queue=info.queue or (pg.spec.queue if pg is not None else ""),
        priority=info.priority,
        created_s=_time(info.creation_timestamp or (pg.metadata.creation_timestamp if pg else None)),
        phase=pg.status.phase if pg is not None else "",
        holding=holding,
        minimum=minimum,
        node=next((t.node_name for t in holding_tasks if t.node_name), ""),
        reserves=reserves,
    )


def named_job(info: vw.JobInfo | None) -> BoundJob:
    """The job a job verb's body names; an InputError when it names none (null, or no Name or Namespace)."""
    if info is None:
        raise InputError("job is null")
    if not info.name or not info.namespace:
        raise InputError("job has no Name or Namespace")
    return job_from_info(info)


def queue_name(queue: vw.QueueInfo | None) -> str:
    """The Volcano queue a queueOverused body names; an InputError when it names none."""
    name = (queue.name or (queue.queue.queue_name if queue.queue else "")) if queue is not None else ""
    if not name:
        raise InputError("queue is null or has no Name")
    return name


def jobs_from_state(state: ClusterState) -> dict[str, BoundJob]:
    """Jobs from PodGroups and their pods in the state: what kilter knows when no session told it more."""
    pods: dict[tuple[str, str], list[tuple[dict[str, int], str, bool]]] = {}
    for pod in state.pods:
        group = pod.metadata.annotations.get("scheduling.k8s.io/group-name")
        if not group or pod.status.phase in ("Succeeded", "Failed"):
            continue
        spec = pod.spec
        names = {r for c in spec.containers for r in (*c.resources.requests, *c.resources.limits)}
        path = f"Pod {pod.metadata.namespace}/{pod.metadata.name}: spec"
        try:
            asks = {r: v for r in sorted(names) if (v := pod_amount(spec, r, path)) > 0}
        except InputError:
            continue
        pods.setdefault((pod.metadata.namespace, group), []).append((asks, spec.node_name, bool(spec.node_name)))
    out: dict[str, BoundJob] = {}
    for pg in state.pod_groups:
        try:
            out[_key(pg)] = _job_from_group(pg, pods.get((pg.metadata.namespace, pg.metadata.name), []))
        except InputError:
            continue  # a PodGroup with unreadable minResources: Volcano's own webhook refuses those
    return out


def _key(pg: PodGroup) -> str:
    return f"{pg.metadata.namespace}/{pg.metadata.name}"


def _job_from_group(pg: PodGroup, pods: Sequence[tuple[dict[str, int], str, bool]]) -> BoundJob:
    holding: dict[str, int] = {}
    everything: dict[str, int] = {}
    for asks, _, bound in pods:
        everything = plus(everything, asks)
        if bound:
            holding = plus(holding, asks)
    reserved = _from_list(pg.spec.min_resources, f"PodGroup {_key(pg)}: spec.minResources")
    minimum = reserved or everything
    return BoundJob(
        key=_key(pg),
        uid=pg.metadata.uid,
        queue=pg.spec.queue,
        priority=0,
        created_s=_time(pg.metadata.creation_timestamp),
        phase=pg.status.phase,
        holding=holding,
        minimum=minimum,
        node=next((node for _, node, bound in pods if bound), ""),
        reserves=bool(reserved),
    )


def build_view(
    state: ClusterState,
    extra: Sequence[ClusterQueue | Cohort | ResourceFlavor],
    *,
    jobs: Mapping[str, BoundJob],
    annotations: Mapping[str, Mapping[str, str]],
    permitted: Mapping[str, BoundJob],
    config: FairSharingConfig,
) -> BoundQueues:
    """The quota view of the state's ClusterQueues, Cohorts and ResourceFlavors (``extra`` wins by name)."""
    cqs = {cq.metadata.name: cq for cq in state.cluster_queues}
    cos = {co.metadata.name: co for co in state.cohorts}
    flavors = {f.metadata.name: f for f in state.flavors}
    for obj in extra:
        if isinstance(obj, ClusterQueue):
            cqs[obj.metadata.name] = obj
        elif isinstance(obj, Cohort):
            cos[obj.metadata.name] = obj
        else:
            flavors[obj.metadata.name] = obj
    tree = build_tree(cqs.values(), cos.values())
    names = {*annotations, *(j.queue for j in jobs.values()), *(j.queue for j in permitted.values())}
    match = FlavorLabels(
        {name: f.spec.node_labels for name, f in flavors.items()},
        {n.metadata.name: n.metadata.labels for n in state.nodes},
    )
    binding = bind_queues(tree, annotations, queues=sorted(names))
    return BoundQueues.build(tree, jobs, binding=binding, flavors=match, permitted=permitted, config=config)


def queue_annotations(state: ClusterState, session: Iterable[vw.QueueInfo]) -> dict[str, dict[str, str]]:
    """Volcano queue name -> its annotations, from the session when it has them, else from the state."""
    out = {q.metadata.name: dict(q.metadata.annotations) for q in state.volcano_queues}
    for info in session:
        if info.queue is not None:
            out[info.name or info.queue.queue_name] = dict(info.queue.queue_annotations)
        elif info.name:
            out.setdefault(info.name, {})
    return out
