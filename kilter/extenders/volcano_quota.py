"""Kueue's cohort quota for Volcano: Volcano jobs as workloads of the ClusterQueue their Queue is bound to.

A Volcano Queue is bound to the ClusterQueue of the same name, or to the one
its ``kilter.dev/cluster-queue`` annotation names; queues bound to nothing
are not kilter's business (every verb abstains for them). ClusterQueue and
Cohort definitions come from the state (Kueue's CRDs in the cluster or the
snapshot) and from ``--queues FILE``, whose objects win by name.

A Volcano job (a PodGroup) holds quota as Kueue's workloads do once
admitted: what its tasks on nodes hold, and, from the moment it is enqueued
(phase Inqueue or later), at least its ``minResources`` — Volcano reserves
that much for an enqueued job, so two jobs permitted in one session cannot
both count on the same quota. A job kilter has just permitted counts too,
until the session shows it enqueued. Its requests, for enqueueing, are its
``minResources`` (or, without them, everything its tasks ask for). Usage is
charged per resource to the first flavor of the ClusterQueue's group whose
ResourceFlavor ``nodeLabels`` match the node the job runs on (the group's
first flavor when none does, or the job holds nothing yet).

The answers are the quota engine's: ``assign_flavors`` for whether a job can
ever fit and whether it fits now, ``find_targets`` (Kueue's preemption, fair
sharing included) for which jobs may lose their quota to it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kilter.extenders import volcano_wire as vw
from kilter.model.annotations import CLUSTER_QUEUE
from kilter.model.core_v1 import Quantity
from kilter.model.errors import InputError
from kilter.model.kueue import ClusterQueue, Cohort, ResourceFlavor
from kilter.model.volcano import PodGroup
from kilter.quota import amount
from kilter.quota.admit import assign_flavors, by_cluster_queue
from kilter.quota.available import available
from kilter.quota.config import FairSharingConfig
from kilter.quota.policy import parse_time
from kilter.quota.preempt import find_targets
from kilter.quota.shares import Shares
from kilter.quota.status import apply_usage
from kilter.quota.tree import FR, QuotaTree, build_tree
from kilter.quota.usage import WorkloadInfo, pod_amount
from kilter.state.cluster import ClusterState

__all__ = ["CLUSTER_QUEUE_ANNOTATION", "EnqueueAnswer", "QuotaView", "VolcanoJob", "from_resource", "job_from_info"]

CLUSTER_QUEUE_ANNOTATION = CLUSTER_QUEUE
ENQUEUED_PHASES = frozenset({"Inqueue", "Running", "Unknown"})
PODS = "pods"


@dataclass(frozen=True)
class VolcanoJob:
    """A Volcano job as the quota engine sees it (amounts in Kueue's canonical units)."""

    key: str  # "namespace/podgroup", Volcano's JobID
    uid: str
    queue: str
    priority: int
    created_s: float
    phase: str
    holding: Mapping[str, int]
    minimum: Mapping[str, int]
    node: str = ""  # a node it runs on, for the flavor its usage is charged to
    reserves: bool = False  # its PodGroup sets minResources, which Volcano reserves once it is enqueued

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]


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


def _plus(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for r, v in b.items():
        out[r] = out.get(r, 0) + v
    return out


def job_from_info(info: vw.JobInfo) -> VolcanoJob:
    """A job from the session's JobInfo."""
    tasks = list((info.tasks or {}).values())
    holding_tasks = [t for t in tasks if t.status & vw.HOLDING]
    if info.allocated is not None:
        holding = from_resource(info.allocated)
    else:
        holding = {}
        for t in holding_tasks:
            holding = _plus(holding, from_resource(t.resreq))
    pg = info.pod_group.normalized() if info.pod_group is not None else None
    minimum = _from_list(pg.spec.min_resources, "$.PodGroup.spec.minResources") if pg is not None else {}
    reserves = bool(minimum)
    if not minimum:
        minimum = from_resource(info.total_request)
        if not minimum:
            for t in tasks:
                if not t.status & vw.ENDED:
                    minimum = _plus(minimum, from_resource(t.resreq))
    return VolcanoJob(
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


def jobs_from_state(state: ClusterState) -> dict[str, VolcanoJob]:
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
    out: dict[str, VolcanoJob] = {}
    for pg in state.pod_groups:
        try:
            out[_key(pg)] = _job_from_group(pg, pods.get((pg.metadata.namespace, pg.metadata.name), []))
        except InputError:
            continue  # a PodGroup with unreadable minResources: Volcano's own webhook refuses those
    return out


def _key(pg: PodGroup) -> str:
    return f"{pg.metadata.namespace}/{pg.metadata.name}"


def _job_from_group(pg: PodGroup, pods: Sequence[tuple[dict[str, int], str, bool]]) -> VolcanoJob:
    holding: dict[str, int] = {}
    everything: dict[str, int] = {}
    for asks, _, bound in pods:
        everything = _plus(everything, asks)
        if bound:
            holding = _plus(holding, asks)
    reserved = _from_list(pg.spec.min_resources, f"PodGroup {_key(pg)}: spec.minResources")
    minimum = reserved or everything
    return VolcanoJob(
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


@dataclass(frozen=True)
class EnqueueAnswer:
    status: int
    reason: str
    never: bool = False


@dataclass
class QuotaView:
    """The cohort tree with every bound queue's jobs charged; built per state version and session."""

    tree: QuotaTree
    jobs: dict[str, VolcanoJob]
    binding: dict[str, str]  # Volcano queue -> ClusterQueue
    flavors: dict[str, ResourceFlavor]
    node_labels: Mapping[str, Mapping[str, str]]
    admitted: dict[str, list[WorkloadInfo]] = field(default_factory=dict)
    config: FairSharingConfig = field(default_factory=FairSharingConfig)
    permitted: dict[str, VolcanoJob] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        state: ClusterState,
        extra: Sequence[ClusterQueue | Cohort | ResourceFlavor],
        jobs: dict[str, VolcanoJob],
        queue_annotations: Mapping[str, Mapping[str, str]],
        permitted: Mapping[str, VolcanoJob],
        *,
        config: FairSharingConfig,
    ) -> QuotaView:
        cqs = {cq.metadata.name: cq for cq in state.cluster_queues}
        cos = {co.metadata.name: co for co in state.cohorts}
        flavors = {f.metadata.name: f for f in state.flavors}
        for obj in extra:
            target: dict[str, object] = (
                cqs if isinstance(obj, ClusterQueue) else cos if isinstance(obj, Cohort) else flavors  # type: ignore[assignment]
            )
            target[obj.metadata.name] = obj
        tree = build_tree(cqs.values(), cos.values())
        binding: dict[str, str] = {}
        names = set(queue_annotations) | {j.queue for j in jobs.values()} | {j.queue for j in permitted.values()}
        for queue in names:
            named = queue_annotations.get(queue, {}).get(CLUSTER_QUEUE_ANNOTATION, queue)
            if named in tree.cluster_queues:
                binding[queue] = named
        view = cls(tree, dict(jobs), binding, flavors, {n.metadata.name: n.metadata.labels for n in state.nodes})
        view.config = config
        view.permitted = dict(permitted)
        for key, job in permitted.items():
            if key not in view.jobs or view.jobs[key].phase not in ENQUEUED_PHASES:
                view.jobs[key] = job
        view._charge()
        return view

    def cluster_queue(self, queue: str) -> str | None:
        cq = self.binding.get(queue)
        node = self.tree.cluster_queues.get(cq) if cq else None
        return cq if node is not None and node.active else None

    def _held(self, job: VolcanoJob) -> dict[str, int]:
        """What the job holds, or what Volcano reserved for it at enqueue if that is more."""
        if job.reserves and (job.phase in ENQUEUED_PHASES or job.key in self.permitted):
            return {r: max(job.holding.get(r, 0), job.minimum.get(r, 0)) for r in {*job.holding, *job.minimum}}
        return dict(job.holding)

    def usage_of(self, job: VolcanoJob, cq_name: str, held: Mapping[str, int]) -> dict[FR, int]:
        """Per (flavor, resource): the flavor whose nodeLabels match the job's node, else the group's first."""
        cq = self.tree.cluster_queues[cq_name]
        labels = self.node_labels.get(job.node, {}) if job.node else None
        out: dict[FR, int] = {}
        for resource, value in held.items():
            group = next((flavors for covered, flavors in cq.groups if resource in covered), None)
            if not group or value <= 0:
                continue
            chosen = group[0]
            if labels is not None:
                for name in group:
                    wanted = self.flavors[name].spec.node_labels if name in self.flavors else {}
                    if all(labels.get(k) == v for k, v in wanted.items()):
                        chosen = name
                        break
            out[(chosen, resource)] = out.get((chosen, resource), 0) + value
        return out

    def _charge(self) -> None:
        per_cq: dict[str, dict[FR, int]] = {}
        infos: list[WorkloadInfo] = []
        for job in self.jobs.values():
            cq = self.cluster_queue(job.queue)
            if cq is None:
                continue
            usage = self.usage_of(job, cq, self._held(job))
            if not usage:
                continue
            bucket = per_cq.setdefault(cq, {})
            for fr, v in usage.items():
                bucket[fr] = amount.add(bucket.get(fr, 0), v)
            infos.append(self._info(job, cq, reserved=True, usage=usage))
        apply_usage(self.tree, per_cq)
        self.admitted = by_cluster_queue(infos)

    def permit(self, job: VolcanoJob) -> None:
        """Charge a job kilter just let Volcano enqueue, so the next decision of the session counts it."""
        self.permitted[job.key] = job
        self._recharge(job)

    def place(self, job_key: str, asks: Mapping[str, int], node: str, *, taken: bool) -> str:
        """A task of the job took (or gave back) ``asks`` on ``node``; why it may not take them ("" if it may).

        This is the quota gate for jobs Volcano enqueues without asking (no
        ``minResources``): a task whose resources would lift its ClusterQueue
        above what it may hold is refused, which rolls its allocation back.
        """
        job = self.jobs.get(job_key)
        cq_name = self.cluster_queue(job.queue) if job is not None else None
        if job is None or cq_name is None:
            return ""
        holding = dict(job.holding)
        for r, v in asks.items():
            holding[r] = max(holding.get(r, 0) + (v if taken else -v), 0)
        moved = replace(job, holding=holding, node=job.node or node)
        if taken:
            cq = self.tree.cluster_queues[cq_name]
            before = self._charged(job.key, cq_name)
            after = self.usage_of(moved, cq_name, self._held(moved))
            short = [fr for fr, v in after.items() if v - before.get(fr, 0) > max(available(cq, fr), 0)]
            if short:
                text = ", ".join(f"{f}/{r}" for f, r in short)
                return f"ClusterQueue {cq_name} has no quota left for this task ({text})"
        self._recharge(moved)
        return ""

    def _charged(self, key: str, cq_name: str) -> dict[FR, int]:
        own = next((w for w in self.admitted.get(cq_name, ()) if w.key == key), None)
        return dict(own.usage) if own is not None else {}

    def _recharge(self, job: VolcanoJob) -> None:
        """Replace the job's charge in its ClusterQueue with what it holds now."""
        cq_name = self.cluster_queue(job.queue)
        if cq_name is None:
            return
        self.jobs[job.key] = job
        cq = self.tree.cluster_queues[cq_name]
        ws = self.admitted.setdefault(cq_name, [])
        old = next((w for w in ws if w.key == job.key), None)
        if old is not None:
            ws.remove(old)
            for fr, v in old.usage.items():
                cq.usage[fr] = amount.sub(cq.usage.get(fr, 0), v)
        usage = self.usage_of(job, cq_name, self._held(job))
        for fr, v in usage.items():
            cq.usage[fr] = amount.add(cq.usage.get(fr, 0), v)
        if usage:
            ws.append(self._info(job, cq_name, reserved=True, usage=usage))
        self.tree.recompute_under(cq.root())

    def _info(self, job: VolcanoJob, cq: str, *, reserved: bool, usage: Mapping[FR, int]) -> WorkloadInfo:
        return WorkloadInfo(
            namespace=job.namespace,
            name=job.name,
            uid=job.uid or job.key,
            cluster_queue=cq,
            local_queue=job.queue,
            priority=job.priority,
            created_s=job.created_s,
            reserved=reserved,
            reserved_s=job.created_s if reserved else None,
            usage=usage,
            requests=job.minimum,
        )

    def _without(self, job: VolcanoJob) -> tuple[dict[str, list[WorkloadInfo]], dict[str, int]]:
        """The admitted lists without ``job``, with its usage taken out of the tree (put back by the caller)."""
        cq = self.cluster_queue(job.queue)
        admitted = {name: [w for w in ws if w.key != job.key] for name, ws in self.admitted.items()}
        return admitted, self._request(job) if cq else {}

    def _request(self, job: VolcanoJob) -> dict[str, int]:
        return {r: v for r, v in job.minimum.items() if v > 0}

    # ------------------------------------------------------------------ answers

    def enqueueable(self, job: VolcanoJob, now: float) -> EnqueueAnswer:
        cq_name = self.cluster_queue(job.queue)
        if cq_name is None:
            return EnqueueAnswer(vw.ABSTAIN, f"queue {job.queue} is bound to no ClusterQueue kilter knows")
        cq = self.tree.cluster_queues[cq_name]
        admitted, requests = self._without(job)
        with _lifted(self, job, cq_name):
            assignment = assign_flavors(cq, requests)
            if assignment.mode == "nofit":
                return EnqueueAnswer(vw.REJECT, f"can never be admitted: {assignment.reason}", never=True)
            if assignment.mode == "fit":
                return EnqueueAnswer(vw.PERMIT, f"fits ClusterQueue {cq_name} ({_flavors(assignment.flavors)})")
            preemptor = self._info(job, cq_name, reserved=False, usage={})
            shares = Shares(self.tree, now=now)
            result = find_targets(
                self.tree, admitted, cq, preemptor, assignment.usage, config=self.config, shares=shares, now=now
            )
        if result.targets:
            names = ", ".join(t.workload.key for t in result.targets[:5])
            return EnqueueAnswer(vw.PERMIT, f"fits ClusterQueue {cq_name} once reclaimed from {names}")
        return EnqueueAnswer(vw.REJECT, f"waits for quota in ClusterQueue {cq_name}: {result.reason}")

    def overused(self, queue: str) -> tuple[bool, str]:
        """Holding more than it may now: above its nominal quota and beyond what its cohort can lend it now.

        A queue within its nominal quota is never overused: Kueue guarantees
        nominal quota, and the borrower is the one to give back.
        """
        cq_name = self.cluster_queue(queue)
        if cq_name is None:
            return False, f"queue {queue} is bound to no ClusterQueue kilter knows"
        cq = self.tree.cluster_queues[cq_name]
        over = [
            fr
            for fr in sorted(cq.usage)
            if cq.usage[fr] > (cq.quotas[fr].nominal if fr in cq.quotas else 0) and available(cq, fr) < 0
        ]
        if over:
            text = ", ".join(f"{f}/{r} by {-available(cq, (f, r))}" for f, r in over)
            return True, f"ClusterQueue {cq_name} holds more than it may: {text}"
        return False, f"ClusterQueue {cq_name} is within what it may hold"

    def victims(self, job: VolcanoJob, now: float) -> tuple[int, set[str], str]:
        """The jobs whose quota ``job`` may take (Kueue's preemption in the bound ClusterQueue)."""
        cq_name = self.cluster_queue(job.queue)
        if cq_name is None:
            return vw.ABSTAIN, set(), f"queue {job.queue} is bound to no ClusterQueue kilter knows"
        cq = self.tree.cluster_queues[cq_name]
        admitted, _ = self._without(job)
        missing = {r: v - job.holding.get(r, 0) for r, v in self._request(job).items() if v > job.holding.get(r, 0)}
        with _lifted(self, job, cq_name):
            assignment = assign_flavors(cq, missing)
            if assignment.mode == "fit":
                return vw.ABSTAIN, set(), f"fits ClusterQueue {cq_name} without taking anyone's quota"
            if assignment.mode == "nofit":
                return vw.REJECT, set(), f"can never be admitted: {assignment.reason}"
            preemptor = self._info(job, cq_name, reserved=False, usage={})
            shares = Shares(self.tree, now=now)
            result = find_targets(
                self.tree, admitted, cq, preemptor, assignment.usage, config=self.config, shares=shares, now=now
            )
        keys = {t.workload.key for t in result.targets}
        if not keys:
            return vw.REJECT, set(), f"no job's quota may go to it: {result.reason}"
        return vw.PERMIT, keys, f"quota may be taken from {', '.join(sorted(keys)[:5])}"


class _lifted:
    """Takes ``job``'s own charge out of the tree for a decision about it, and puts it back."""

    def __init__(self, view: QuotaView, job: VolcanoJob, cq_name: str) -> None:
        self.view = view
        self.cq = view.tree.cluster_queues[cq_name]
        own = next((w for w in view.admitted.get(cq_name, ()) if w.key == job.key), None)
        self.usage = dict(own.usage) if own is not None else {}

    def __enter__(self) -> None:
        if self.usage:
            for fr, v in self.usage.items():
                self.cq.usage[fr] = amount.sub(self.cq.usage.get(fr, 0), v)
            self.view.tree.recompute_under(self.cq.root())

    def __exit__(self, *exc: object) -> None:
        if self.usage:
            for fr, v in self.usage.items():
                self.cq.usage[fr] = amount.add(self.cq.usage.get(fr, 0), v)
            self.view.tree.recompute_under(self.cq.root())


def _flavors(flavors: Mapping[str, str]) -> str:
    return ", ".join(f"{r} in {f}" for r, f in sorted(flavors.items())) or "nothing to charge"


def queue_annotations(state: ClusterState, session: Iterable[vw.QueueInfo]) -> dict[str, dict[str, str]]:
    """Volcano queue name -> its annotations, from the session when it has them, else from the state."""
    out = {q.metadata.name: dict(q.metadata.annotations) for q in state.volcano_queues}
    for info in session:
        if info.queue is not None:
            out[info.name or info.queue.queue_name] = dict(info.queue.queue_annotations)
        elif info.name:
            out.setdefault(info.name, {})
    return out
