"""What runs on the fleet, as a maintenance plan weighs it: each job's GPUs per domain, start, expected end.

A job is a gang (``gangs.identity.key_of``) or, for a GPU pod of no gang, the
pod itself. Its expected runtime is what the split-wait rule reads: the
job's ``kilter.dev/expected-runtime``, Kueue's max-execution-time label,
its ``activeDeadlineSeconds``, else the median runtime of its ClusterQueue's
finished Workloads of its size; its start is when its Workload got quota,
else its first pod's creation. A job may also say how much work a kill
loses at most: ``kilter.dev/checkpoint-interval`` (a duration, on the job or
its pods). A job whose pods' priority is below ``preemptible_below`` is
preemptible. A ClusterQueue's (or its Cohorts') ``kilter.dev/min-runtime``
guards its jobs from eviction until they have run that long.

A bad annotation costs the job its estimate, never the plan: the plan then
assumes the worst (no known end, no checkpoint) and says why.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from kilter.gangs.identity import key_of
from kilter.gangs.learned import learner_of
from kilter.gangs.wait_settings import QueueWaitRules
from kilter.gangs.waits import facts_of
from kilter.lifecycle.progress import stored_progress
from kilter.model.annotations import LIFECYCLE
from kilter.model.core_v1 import Pod
from kilter.model.durations import parse_duration
from kilter.model.errors import InputError
from kilter.quota.runtimes import declared_runtime
from kilter.quota.tree import build_tree
from kilter.state.store import ClusterStore
from kilter.topology import pod_gpus
from kilter.topology.maintenance import Work
from kilter.topology.split_wait import SplitWait

__all__ = ["CHECKPOINT_INTERVAL", "MIRROR", "FleetWork", "fleet_work"]

CHECKPOINT_INTERVAL = "kilter.dev/checkpoint-interval"
"""Annotation on a job or its pods: it checkpoints at least this often (a duration), so a kill loses at most that."""

MIRROR = "kubernetes.io/config.mirror"
"""Annotation of a mirror pod (a static pod's shadow): no drain can move it."""
_OWNERS = {"workload": ("kueue.x-k8s.io", "Workload"), "podgroup": ("scheduling.volcano.sh", "PodGroup")}


@dataclass
class FleetWork:
    """The jobs on the chosen nodes, those nodes per domain with their usable GPUs, and what could not be read."""

    works: list[Work]
    domain_nodes: dict[str, list[str]]  # domain -> its chosen GPU nodes, by name
    domain_gpus: dict[str, int]  # domain -> the usable GPUs of those nodes (idle while the domain waits)
    problems: list[str] = field(default_factory=list)


def fleet_work(
    store: ClusterStore, *, now_s: float, nodes: Collection[str] | None = None, preemptible_below: int = 0
) -> FleetWork:
    """Every job holding GPUs on ``nodes`` (None: the whole fleet; retired nodes never), as ``Work`` placed on
    those nodes' domains (a kill still loses its work on all its GPUs), with its expected end where one is known."""
    fleet = store.fleet()
    state = store.state()
    chosen = set(fleet.node_names) if nodes is None else set(nodes) & set(fleet.node_names)
    chosen -= {n for i, n in enumerate(fleet.node_names) if fleet.node_labels[i].get(LIFECYCLE) == "retired"}
    settings = QueueWaitRules.build(state, SplitWait())
    learner = learner_of(state.workloads, state.catalog.device_resources)
    tree = build_tree(state.cluster_queues, state.cohorts)
    guards = {name: limit for name, node in tree.cluster_queues.items() if (limit := node.min_runtime()) is not None}
    out_problems: list[str] = []
    devices = sorted(state.catalog.device_resources)
    members: dict[str, list[tuple[Pod, str, int]]] = {}
    for pod in store.pods():  # not the fleet's bookings: a cordoned or degraded node books nothing, yet runs pods
        node = pod.spec.node_name
        if not node or node not in fleet.node_index or not _moves(pod):
            continue
        asks = [
            pod_gpus.count(pod.spec, r, path=f"pod {pod.metadata.namespace}/{pod.metadata.name}: spec") for r in devices
        ]
        unread = next((c for c in asks if isinstance(c, pod_gpus.Unreadable)), None)
        if unread is not None:  # it holds its whole node, as the fleet books it: a drain there kills its work
            out_problems.append(f"{unread.why}; taken to hold node {node} whole")
            gpus = int(fleet.bitmap.node_gpu_counts[fleet.node_index[node]])
        else:
            gpus = sum(c for c in asks if isinstance(c, int))
        if gpus > 0:
            gang = key_of(pod)
            key = gang.format() if gang is not None else f"{pod.metadata.namespace}/pod/{pod.metadata.name}"
            members.setdefault(key, []).append((pod, node, gpus))
    out = FleetWork([], {}, {}, out_problems)
    counts = fleet.bitmap.node_gpu_counts
    for i, name in enumerate(fleet.node_names):
        if name in chosen:
            domain = fleet.domain_of_node(i)
            out.domain_nodes.setdefault(domain, []).append(name)
            takes = fleet.unusable.get(name) is None or _cordoned_by_kilter(store, name)
            out.domain_gpus[domain] = out.domain_gpus.get(domain, 0) + (int(counts[i]) if takes else 0)
    for key, held in sorted(members.items()):
        placement: dict[str, int] = {}
        for _, node, gpus in held:
            if node in chosen:
                domain = fleet.domain_of_node(fleet.node_index[node])
                placement[domain] = placement.get(domain, 0) + gpus
        if placement:
            pods = [p for p, _, _ in held]
            gpus = sum(g for _, _, g in held)
            job = _Job(key, pods, gpus, placement)
            out.works.append(
                _work(store, job, settings, learner.estimate, guards, now_s, preemptible_below, out.problems)
            )
    return out


@dataclass(frozen=True)
class _Job:
    key: str
    pods: list[Pod]
    gpus: int
    placement: dict[str, int]


def _work(
    store: ClusterStore,
    job: _Job,
    settings: QueueWaitRules,
    learned: Callable[[str, int], float | None],
    guards: Mapping[str, float],
    now_s: float,
    preemptible_below: int,
    problems: list[str],
) -> Work:
    key, pods, gpus = job.key, job.pods, job.gpus
    ns, kind, *names = key.split("/")
    owner = _OWNERS.get(kind)
    obj = store.get(owner[0], owner[1], ns, names[0]) if owner is not None else None
    facts = facts_of(owner[1] if owner and obj is not None else "Job", ns, "/".join(names), obj, pods, settings)
    started = facts.since_s if facts.since_s is not None else now_s
    end = checkpoint = None
    try:
        runtime = declared_runtime(facts.annotations, facts.labels, facts.active_deadline_s, path=facts.where)
        if runtime is None and facts.learned and facts.cluster_queue:
            runtime = learned(facts.cluster_queue, gpus)
        end = started + runtime if runtime is not None and started + runtime > now_s else None
        raw = facts.annotations.get(CHECKPOINT_INTERVAL)
        checkpoint = parse_duration(raw, path=f"{facts.where}.annotations[{CHECKPOINT_INTERVAL}]") if raw else None
    except InputError as exc:
        problems.append(f"{key}: {exc}; planned as if it had no known end and no checkpoint")
        end = checkpoint = None
    guard = guards.get(facts.cluster_queue or "")
    priorities = [p.spec.priority for p in pods if p.spec.priority is not None]
    preemptible = bool(priorities) and max(priorities) < preemptible_below
    return Work(
        key,
        gpus,
        job.placement,
        started,
        expected_end_s=end,
        checkpoint_s=checkpoint,
        preemptible=preemptible,
        guarded_until_s=started + guard if guard else None,
        pods=len(pods),
    )


def _moves(pod: Pod) -> bool:
    """Whether a drain moves the pod off its node (what ``kubectl drain`` evicts): running or about to, and
    neither a DaemonSet's nor a mirror pod."""
    if pod.status.phase in ("Succeeded", "Failed"):
        return False
    controller = pod.metadata.controller
    return not (controller is not None and controller.kind == "DaemonSet") and MIRROR not in pod.metadata.annotations


def _cordoned_by_kilter(store: ClusterStore, name: str) -> bool:
    """A node out of service only by a drain's own cordon: its free GPUs idle because of the drain, so they are
    charged while its domain waits (a person's cordon or a failure idles them whatever the plan does)."""
    progress = stored_progress(store, name)
    return progress is not None and progress.cordoned and progress.phase == "draining"
