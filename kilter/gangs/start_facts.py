"""What expected starts are worked out from, read off the cluster's objects: running gangs and pending gangs.

``held_gangs``: every bound GPU pod that has not ended, grouped by its gang
(``identity.key_of``; a pod of no gang is its own), with the GPUs it holds
per node and when it is expected to free them. ``pending_gangs``: every
pending gang in queue order, with its pod sets, the domains it may take per
platform and its expected runtime. ``gangs.expected_starts`` says how and
why; the runtimes are ``waits.expected_runtime``'s, the very reading the
split wait uses, so both agree on how long a job runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from kilter.gangs.identity import GangKey, key_of
from kilter.gangs.wait_settings import QueueWaitRules
from kilter.gangs.waits import Learned, expected_runtime, facts_of
from kilter.model.core_v1 import Pod, PodTemplateSpec
from kilter.model.errors import InputError
from kilter.model.jobs import PodSetSpec, read_job
from kilter.model.kueue import KUEUE_GROUP, Workload
from kilter.quota.policy import read_time
from kilter.quota.usage import workload_infos
from kilter.state.cluster import ClusterState
from kilter.topology import pod_gpus
from kilter.topology.fleet import ENDED_PHASES, Fleet
from kilter.topology.plan import GangRequest, gang_request
from kilter.topology.reservations import expected_end
from kilter.topology.split_wait import fewest_domains_idle

__all__ = ["Held", "Waiting", "held_gangs", "job_gang", "pending_gangs"]

VOLCANO = "scheduling.volcano.sh"
_WAITING_PHASES = frozenset({"Pending", "Inqueue"})


@dataclass(frozen=True, slots=True)
class Held:
    """A running gang: its GPUs per node (fleet indices) and when it is expected to free them."""

    key: str
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]
    started_s: float
    runtime_s: float | None
    expected_end_s: float
    problem: str = ""  # why its runtime is unknown though its job declares one (a bad annotation)
    owner: str = ""  # ``namespace/name`` of its Workload, PodGroup or gang: ``Waiting.owner`` while it waited


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pending gang in queue order: its pod sets (pods, GPUs per pod), and per platform it may run on (fleet
    platform index) the domains it may take."""

    kind: str  # Workload, PodGroup, or "pods of gang"
    namespace: str
    name: str
    priority: int
    created_s: float
    pod_sets: tuple[tuple[int, int], ...] = ()
    platforms: tuple[tuple[int, int], ...] = ()  # (platform, domains allowed); none: the idle fleet cannot hold it
    runtime_s: float | None = None
    problem: str = ""  # why it is not reserved for before anything is tried (a bad annotation, an unreadable job)
    quota_reserved: bool = False
    cluster_queue: str = ""  # where it queues (Kueue's ClusterQueue, or the one a Volcano queue stands for)

    @property
    def owner(self) -> str:
        """``namespace/name``: whose a reservation is, in every door's words."""
        return f"{self.namespace}/{self.name}"


def _workloads_by_name(state: ClusterState) -> dict[tuple[str, str], Workload]:
    """Workloads not finished, by (namespace, name) and by (namespace, owning job's name)."""
    out: dict[tuple[str, str], Workload] = {}
    for wl in sorted(state.workloads, key=lambda w: (w.metadata.namespace, w.metadata.name)):
        if wl.status.condition("Finished"):
            continue
        ns = wl.metadata.namespace
        out.setdefault((ns, wl.metadata.name), wl)
        for ref in wl.metadata.owner_references:
            out.setdefault((ns, ref.name), wl)
    return out


def _raw_index(state: ClusterState, group: str, kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in state.raw.of(group, kind):
        meta = obj.get("metadata")
        if isinstance(meta, Mapping):
            out.setdefault((str(meta.get("namespace") or ""), str(meta.get("name") or "")), obj)
    return out


def _bound_gpu_pods(state: ClusterState, fleet: Fleet) -> dict[str, list[tuple[Pod, int, int]]]:
    """Per gang key, (pod, node index, GPUs) of each bound GPU pod that has not ended; a pod of no gang is keyed
    ``namespace/pod/name``."""
    resources = sorted(state.catalog.device_resources)
    out: dict[str, list[tuple[Pod, int, int]]] = {}
    for pod in state.pods:
        node = fleet.node_index.get(pod.spec.node_name) if pod.spec.node_name else None
        if node is None or pod.status.phase in ENDED_PHASES:
            continue
        gpus = 0
        for r in resources:
            n = pod_gpus.count(pod.spec, r)
            gpus += int(fleet.bitmap.node_gpu_counts[node]) if isinstance(n, pod_gpus.Unreadable) else n
        if gpus <= 0:
            continue
        key = key_of(pod)
        text = key.format() if key is not None else f"{pod.metadata.namespace}/pod/{pod.metadata.name}"
        out.setdefault(text, []).append((pod, node, gpus))
    return out


def _owner_of(
    key: str, pods: Sequence[Pod], workloads: Mapping[tuple[str, str], Workload], groups: Mapping[Any, Any]
) -> tuple[str, Workload | None, Mapping[str, Any] | None]:
    """The object a running gang's job is read from: its Workload (by name or its job's name), its PodGroup, or
    none (its pods alone)."""
    try:
        gk: GangKey | None = GangKey.parse(key)
    except InputError:
        gk = None
    ns = pods[0].metadata.namespace
    names = [gk.names[0]] if gk is not None else []
    names += sorted({r.name for p in pods for r in p.metadata.owner_references})
    for name in names:
        wl = workloads.get((ns, name))
        if wl is not None:
            return "Workload", wl, None
    if gk is not None and gk.kind == "podgroup":
        group = groups.get((ns, gk.names[0]))
        if group is not None:
            return "PodGroup", None, group
    return "pods of gang", None, None


def held_gangs(
    state: ClusterState, fleet: Fleet, *, now_s: float, learned: Learned | None, settings: QueueWaitRules
) -> list[Held]:
    """Every running gang's holding (module docstring), by key."""
    workloads = _workloads_by_name(state)
    raw_workloads = _raw_index(state, KUEUE_GROUP, "Workload")
    groups = _raw_index(state, VOLCANO, "PodGroup")
    out = []
    for key, members in sorted(_bound_gpu_pods(state, fleet).items()):
        pods = sorted((m[0] for m in members), key=lambda p: p.metadata.name)
        kind, wl, group = _owner_of(key, pods, workloads, groups)
        obj: Mapping[str, Any] | None = group
        started = None
        if wl is not None:
            obj = raw_workloads.get((wl.metadata.namespace, wl.metadata.name))
            started = read_time(wl.status.since("Admitted")) if wl.status.condition("Admitted") else None
        if started is None:
            starts = [t for p in pods if (t := read_time(p.status.start_time)) is not None]
            made = [t for p in pods if (t := read_time(p.metadata.creation_timestamp)) is not None]
            started = min(starts) if starts else min(made) if made else now_s
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        name = str(meta.get("name")) if isinstance(meta, Mapping) else key.split("/")[-1]
        per_node: dict[int, int] = {}
        for _, node, taken in members:
            per_node[node] = per_node.get(node, 0) + taken
        used = sorted(n for n, taken in per_node.items() if taken)
        gpus = sum(m[2] for m in members)
        problem, runtime = "", None
        try:
            facts = facts_of(kind, pods[0].metadata.namespace, name, obj, pods, settings)
            runtime = expected_runtime(facts, gpus, learned)
        except InputError as exc:
            problem = str(exc)
        end = expected_end(started, runtime, now_s)
        owner = f"{pods[0].metadata.namespace}/{name}"
        out.append(Held(key, tuple(used), tuple(per_node[n] for n in used), started, runtime, end, problem, owner))
    return out


# ---------------------------------------------------------------- pending gangs


def _domains_allowed(fleet: Fleet, request: GangRequest) -> tuple[tuple[int, int], ...]:
    """(platform, domains the gang may take) per platform of the fleet it could run on; none where the idle
    fleet cannot hold it."""
    shapes = tuple((ps.count, ps.gpus_per_pod) for ps in request.pod_sets)
    required = request.one_domain or any(ps.topology.required for ps in request.pod_sets)
    loose = all(ps.topology.unconstrained for ps in request.pod_sets)
    out = []
    for i, p in enumerate(fleet.platforms):
        if p.device_resource != request.resource or (request.platform and p.name != request.platform):
            continue
        least = fewest_domains_idle(fleet, i, shapes)
        if not least or (required and least > 1):
            continue
        out.append((i, 1 if required else len(fleet.domain_ids) if loose else least))
    return tuple(out)


Asked = tuple[list[GangRequest], list[PodTemplateSpec]]  # a job's GPU gangs, and its pod templates


def _requests_of(fleet: Fleet, job_obj: dict[str, Any]) -> Asked:
    job = read_job(job_obj)
    requests = [
        gang_request(job.name if len(job.gangs) == 1 else f"{job.name}/group-{i}", ps, fleet.catalog)
        for i, ps in enumerate(job.gangs)
    ]
    return [r for r in requests if r.pod_sets], [ps.template for gang in job.gangs for ps in gang]


def _merged(requests: Sequence[GangRequest], fleet: Fleet) -> tuple[tuple[tuple[int, int], ...], tuple[Any, ...]]:
    """A job of several gangs waits for them all: their pod sets together, in as many domains as each takes."""
    shapes = tuple((ps.count, ps.gpus_per_pod) for r in requests for ps in r.pod_sets)
    each = [dict(_domains_allowed(fleet, r)) for r in requests]
    common = set(each[0]).intersection(*each[1:]) if each else set()
    return shapes, tuple((p, sum(e[p] for e in each)) for p in sorted(common))


def _pending_workloads(
    state: ClusterState, fleet: Fleet, learned: Learned | None, settings: QueueWaitRules
) -> Iterable[Waiting]:
    raw = _raw_index(state, KUEUE_GROUP, "Workload")
    try:
        infos = {i.key: i for i in workload_infos(state.workloads, state.local_queues, state.priority_classes)}
    except InputError:
        infos = {}
    for wl in state.workloads:
        status, meta = wl.status, wl.metadata
        if status.condition("Finished") or status.condition("Admitted") or wl.spec.active is False:
            continue  # running, done, or deactivated: Kueue considers it no more
        info = infos.get(f"{meta.namespace}/{meta.name}")
        created = read_time(meta.creation_timestamp)
        base = Waiting(
            "Workload",
            meta.namespace,
            meta.name,
            info.priority if info is not None else (wl.spec.priority or 0),
            created if created is not None else math.inf,
            quota_reserved=status.condition("QuotaReserved"),
        )
        obj = raw.get((meta.namespace, meta.name))
        yield _read(base, fleet, partial(_requests_of, fleet, dict(obj or {})), obj, (), learned, settings)


def _read(
    base: Waiting,
    fleet: Fleet,
    requests: Callable[[], Asked],
    obj: Mapping[str, Any] | None,
    pods: Sequence[Pod],
    learned: Learned | None,
    settings: QueueWaitRules,
) -> Waiting:
    """``base`` with its pod sets, domains allowed and runtime; a job that does not read keeps the error."""
    try:
        asked, templates = requests()
        if not asked:
            return dataclasses.replace(base, problem="it asks for no GPUs")
        shapes, platforms = _merged(asked, fleet)
        gpus = sum(c * g for c, g in shapes)
        facts = facts_of(base.kind, base.namespace, base.name, obj, [*pods, *templates], settings)
        runtime = expected_runtime(facts, gpus, learned)
    except InputError as exc:
        return dataclasses.replace(base, problem=str(exc))
    return dataclasses.replace(
        base, pod_sets=shapes, platforms=platforms, runtime_s=runtime, cluster_queue=facts.cluster_queue or ""
    )


def _pending_pods(state: ClusterState) -> dict[GangKey, list[Pod]]:
    """The pods not yet bound of each gang none of whose pods is bound yet (one partly bound is starting)."""
    out: dict[GangKey, list[Pod]] = {}
    started: set[GangKey] = set()
    for pod in state.pods:
        key = key_of(pod)
        if key is None or pod.status.phase in ENDED_PHASES:
            continue
        if pod.spec.node_name:
            started.add(key)
        else:
            out.setdefault(key, []).append(pod)
    return {key: pods for key, pods in out.items() if key not in started}


def _pods_request(fleet: Fleet, name: str, pods: Sequence[Pod]) -> Asked:
    resources = sorted(fleet.catalog.device_resources)
    per: dict[int, list[Pod]] = {}
    for pod in pods:
        asked = pod_gpus.ask(pod.spec, resources, who=f"pod {pod.metadata.name}")
        if asked is not None:
            per.setdefault(asked[1], []).append(pod)
    sets = [
        PodSetSpec(f"gpus-{g}", len(ps), PodTemplateSpec(metadata=ps[0].metadata, spec=ps[0].spec))
        for g, ps in sorted(per.items(), reverse=True)
    ]
    return ([gang_request(name, sets, fleet.catalog)] if sets else []), []


def _pending_of_pods(
    state: ClusterState, fleet: Fleet, learned: Learned | None, settings: QueueWaitRules
) -> Iterable[Waiting]:
    """Volcano PodGroups Pending or Inqueue and gangs of bare pods, from their pods not yet bound."""
    workloads = _workloads_by_name(state)
    groups = _raw_index(state, VOLCANO, "PodGroup")
    typed = {(g.metadata.namespace, g.metadata.name): g for g in state.pod_groups}
    for gk, pods in sorted(_pending_pods(state).items(), key=lambda item: item[0].format()):
        ns, name = gk.namespace, gk.names[0]
        owners = {name, *(r.name for p in pods for r in p.metadata.owner_references)}
        if any((ns, n) in workloads for n in owners):
            continue  # Kueue's: its Workload is the gang
        pods = sorted(pods, key=lambda p: p.metadata.name)
        made = [t for p in pods if (t := read_time(p.metadata.creation_timestamp)) is not None]
        kind, obj = "pods of gang", None
        if gk.kind == "podgroup" and (ns, name) in groups:
            group = typed.get((ns, name))
            if group is not None and group.status.phase not in _WAITING_PHASES:
                continue
            kind, obj = "PodGroup", groups[(ns, name)]
            made = [
                t for t in [read_time(group.metadata.creation_timestamp if group else None)] if t is not None
            ] or made
        elif gk.kind != "podgroup":
            name = gk.name
        base = Waiting(kind, ns, name, 0, min(made) if made else math.inf)
        yield _read(base, fleet, partial(_pods_request, fleet, name, pods), obj, pods, learned, settings)


def pending_gangs(
    state: ClusterState, fleet: Fleet, learned: Learned | None, settings: QueueWaitRules
) -> list[Waiting]:
    """Every pending gang in queue order (module docstring)."""
    found = [*_pending_workloads(state, fleet, learned, settings), *_pending_of_pods(state, fleet, learned, settings)]
    return sorted(found, key=lambda w: (not w.quota_reserved, -w.priority, w.created_s, w.kind, w.namespace, w.name))


def job_gang(
    obj: Mapping[str, Any],
    fleet: Fleet,
    *,
    created_s: float,
    learned: Learned | None,
    settings: QueueWaitRules,
) -> Waiting:
    """Job ``obj`` (any kind ``read_job`` reads, as received) as a pending gang created at ``created_s``."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    kind = str(obj.get("kind") or "Job")
    base = Waiting(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""), 0, created_s)
    return _read(base, fleet, partial(_requests_of, fleet, dict(obj)), obj, (), learned, settings)
