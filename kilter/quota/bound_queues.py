"""Kueue's cohort quota for queues bound to ClusterQueues: enqueueable, overused, victims, permit, place.

Volcano has no cohorts; kilter gives its Queues Kueue's. A queue is bound
to the ClusterQueue of the same name, or to the one its
``kilter.dev/cluster-queue`` annotation names (``bind_queues``); queues bound
to nothing are not kilter's business (every answer abstains for them). A
queue bound to an *inactive* ClusterQueue (under a cohort cycle, or of a
spec Kueue would refuse) is refused everything, as Kueue's inactive
ClusterQueue admits nothing: not enqueued, overused, no victims, no task
placed, each with the ClusterQueue's reason. The
jobs of bound queues are charged to their ClusterQueues as
``bound_jobs`` says, and the answers are the quota engine's own, so that the
Volcano verbs and ``kilter simulate --quota volcano`` decide alike:

- ``enqueueable``: ``assign_flavors`` for whether the job can ever fit and
  whether it fits now; when it fits only by preemption, ``find_targets``
  (Kueue's preemption, fair sharing included) for whether anyone's quota
  may go to it. Permit, reject (waits, or never fits), or abstain.
- ``overused``: above nominal quota and beyond what the cohort can lend now.
- ``victims``: the jobs ``find_targets`` would take quota from for what the
  job still misses; abstain when quota is not the obstacle.
- ``permit`` / ``place`` / ``release``: the job's charge follows what it
  was permitted, what its tasks took on nodes, and its end.

Every change of usage goes through ``available.add_usage``/``remove_usage``
(``apply_usage`` for the first charge), and a decision's what-if through a
``whatif.Journal`` that is undone before the answer is returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import IntEnum

from kilter.model.annotations import CLUSTER_QUEUE
from kilter.quota import amount, bound_jobs
from kilter.quota.admit import assign_flavors, by_cluster_queue
from kilter.quota.available import add_usage, available, remove_usage
from kilter.quota.bound_jobs import BoundJob, FlavorMatch, workload_info
from kilter.quota.config import FairSharingConfig
from kilter.quota.preempt import PreemptionTargets, find_targets
from kilter.quota.shares import Shares
from kilter.quota.status import apply_usage
from kilter.quota.tree import FR, QuotaNode, QuotaTree
from kilter.quota.usage import WorkloadInfo
from kilter.quota.whatif import Journal

__all__ = ["CLUSTER_QUEUE_ANNOTATION", "BoundQueues", "EnqueueAnswer", "QueueVerdict", "VictimsAnswer", "bind_queues"]

CLUSTER_QUEUE_ANNOTATION = CLUSTER_QUEUE


class QueueVerdict(IntEnum):
    """A three-way answer; the values are Volcano's ``util.Permit``/``Abstain``/``Reject``, sent as they are."""

    PERMIT = 1
    ABSTAIN = 0
    REJECT = -1


@dataclass(frozen=True)
class EnqueueAnswer:
    """``enqueueable``'s answer, with the reason kilter records for the job."""

    status: QueueVerdict
    reason: str
    never: bool = False  # rejected because the job can never fit its ClusterQueue


@dataclass(frozen=True)
class VictimsAnswer:
    """``victims``' answer: PERMIT with the jobs that may lose their quota, else why none may."""

    status: QueueVerdict
    keys: frozenset[str]  # the victims' job keys; empty unless PERMIT
    reason: str


def bind_queues(
    tree: QuotaTree, annotations: Mapping[str, Mapping[str, str]], *, queues: Iterable[str]
) -> dict[str, str]:
    """Queue -> the ClusterQueue it is bound to, for each of ``queues`` bound to one the tree has."""
    out: dict[str, str] = {}
    for queue in queues:
        named = annotations.get(queue, {}).get(CLUSTER_QUEUE_ANNOTATION, queue)
        if named in tree.cluster_queues:
            out[queue] = named
    return out


@dataclass
class BoundQueues:
    """The cohort tree with every bound queue's jobs charged; built per state version and session."""

    tree: QuotaTree
    jobs: dict[str, BoundJob]
    binding: dict[str, str]  # queue -> ClusterQueue
    flavors: FlavorMatch
    config: FairSharingConfig = field(default_factory=FairSharingConfig)
    permitted: dict[str, BoundJob] = field(default_factory=dict)
    admitted: dict[str, list[WorkloadInfo]] = field(default_factory=dict)  # per ClusterQueue: the jobs charged

    @classmethod
    def build(
        cls,
        tree: QuotaTree,
        jobs: Mapping[str, BoundJob],
        *,
        binding: dict[str, str],
        flavors: FlavorMatch,
        permitted: Mapping[str, BoundJob],
        config: FairSharingConfig,
    ) -> BoundQueues:
        """Charge ``jobs`` (and the ``permitted`` ones the jobs do not show enqueued yet) to ``tree``."""
        view = cls(tree, dict(jobs), binding, flavors, config=config, permitted=dict(permitted))
        for key, job in permitted.items():
            if key not in view.jobs or view.jobs[key].phase not in bound_jobs.ENQUEUED_PHASES:
                view.jobs[key] = job
        per_cq: dict[str, dict[FR, int]] = {}
        infos: list[WorkloadInfo] = []
        for job in view.jobs.values():
            cq = view.cluster_queue(job.queue)
            if cq is None:
                continue
            usage = view._usage(job, cq)
            if not usage:
                continue
            bucket = per_cq.setdefault(cq, {})
            for fr, v in usage.items():
                bucket[fr] = amount.add(bucket.get(fr, 0), v)
            infos.append(workload_info(job, cq, reserved=True, usage=usage))
        apply_usage(tree, per_cq)
        view.admitted = by_cluster_queue(infos)
        return view

    def cluster_queue(self, queue: str) -> str | None:
        """The active ClusterQueue ``queue`` is bound to, or None."""
        cq = self.binding.get(queue)
        node = self.tree.cluster_queues.get(cq) if cq else None
        return cq if node is not None and node.active else None

    def inactive(self, queue: str) -> str:
        """Why ``queue``'s ClusterQueue admits nothing ("" when it is bound to none, or to an active one)."""
        cq = self.binding.get(queue)
        node = self.tree.cluster_queues.get(cq) if cq else None
        if node is None or node.active:
            return ""
        return f"ClusterQueue {node.name} is inactive ({node.inactive_reason}): {node.inactive_message}"

    def _usage(self, job: BoundJob, cq_name: str) -> dict[FR, int]:
        amounts = bound_jobs.held(job, permitted=self.permitted)
        return bound_jobs.usage_of(job, self.tree.cluster_queues[cq_name], amounts=amounts, flavors=self.flavors)

    def _charged(self, key: str, cq_name: str) -> dict[FR, int]:
        own = next((w for w in self.admitted.get(cq_name, ()) if w.key == key), None)
        return dict(own.usage) if own is not None else {}

    # ------------------------------------------------------------------ charges

    def permit(self, job: BoundJob) -> None:
        """Charge a job kilter just let Volcano enqueue, so the next decision counts it."""
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
            return self.inactive(job.queue) if job is not None and taken else ""
        holding = dict(job.holding)
        for r, v in asks.items():
            holding[r] = max(holding.get(r, 0) + (v if taken else -v), 0)
        moved = replace(job, holding=holding, node=job.node or node)
        if taken:
            cq = self.tree.cluster_queues[cq_name]
            before = self._charged(job.key, cq_name)
            after = self._usage(moved, cq_name)
            short = [fr for fr, v in after.items() if v - before.get(fr, 0) > max(available(cq, fr), 0)]
            if short:
                text = ", ".join(f"{f}/{r}" for f, r in short)
                return f"ClusterQueue {cq_name} has no quota left for this task ({text})"
        self._recharge(moved)
        return ""

    def release(self, job_key: str) -> None:
        """The job ended or was evicted: its charge and its permit go (it must be enqueued again)."""
        job = self.jobs.pop(job_key, None)
        self.permitted.pop(job_key, None)
        cq_name = self.cluster_queue(job.queue) if job is not None else None
        if cq_name is not None:
            self._uncharge(job_key, self.tree.cluster_queues[cq_name])

    def _uncharge(self, key: str, cq: QuotaNode) -> None:
        ws = self.admitted.setdefault(cq.name, [])
        old = next((w for w in ws if w.key == key), None)
        if old is not None:
            ws.remove(old)
            for fr, v in old.usage.items():
                remove_usage(cq, fr, v)

    def _recharge(self, job: BoundJob) -> None:
        """Replace the job's charge in its ClusterQueue with what it holds now."""
        cq_name = self.cluster_queue(job.queue)
        if cq_name is None:
            return
        self.jobs[job.key] = job
        cq = self.tree.cluster_queues[cq_name]
        self._uncharge(job.key, cq)
        usage = self._usage(job, cq_name)
        for fr, v in usage.items():
            add_usage(cq, fr, v)
        if usage:
            self.admitted[cq_name].append(workload_info(job, cq_name, reserved=True, usage=usage))

    @contextmanager
    def _lifted(self, job: BoundJob, cq: QuotaNode) -> Iterator[dict[str, list[WorkloadInfo]]]:
        """The tree without ``job``'s own charge, for a decision about it; the admitted lists without it."""
        journal = Journal()
        own = self._charged(job.key, cq.name)
        if own:
            journal.remove(cq, own)
        try:
            yield {name: [w for w in ws if w.key != job.key] for name, ws in self.admitted.items()}
        finally:
            journal.undo()

    def _targets(
        self,
        job: BoundJob,
        cq: QuotaNode,
        *,
        usage: Mapping[FR, int],
        admitted: dict[str, list[WorkloadInfo]],
        now: float,
    ) -> PreemptionTargets:
        preemptor = workload_info(job, cq.name, reserved=False, usage={})
        shares = Shares(self.tree, now=now)
        return find_targets(self.tree, admitted, cq, preemptor, usage, config=self.config, shares=shares, now=now)

    # ------------------------------------------------------------------ answers

    def enqueueable(self, job: BoundJob, now: float) -> EnqueueAnswer:
        """Whether Volcano may enqueue the job now: it fits, or fits once Kueue's preemption reclaims quota."""
        cq_name = self.cluster_queue(job.queue)
        if cq_name is None:
            if inactive := self.inactive(job.queue):
                return EnqueueAnswer(QueueVerdict.REJECT, inactive)
            return EnqueueAnswer(QueueVerdict.ABSTAIN, f"queue {job.queue} is bound to no ClusterQueue kilter knows")
        cq = self.tree.cluster_queues[cq_name]
        with self._lifted(job, cq) as admitted:
            assignment = assign_flavors(cq, bound_jobs.requests(job))
            if assignment.mode == "nofit":
                return EnqueueAnswer(QueueVerdict.REJECT, f"can never be admitted: {assignment.reason}", never=True)
            if assignment.mode == "fit":
                return EnqueueAnswer(
                    QueueVerdict.PERMIT, f"fits ClusterQueue {cq_name} ({_flavors(assignment.flavors)})"
                )
            result = self._targets(job, cq, usage=assignment.usage, admitted=admitted, now=now)
        if result.targets:
            names = ", ".join(t.workload.key for t in result.targets[:5])
            return EnqueueAnswer(QueueVerdict.PERMIT, f"fits ClusterQueue {cq_name} once reclaimed from {names}")
        return EnqueueAnswer(QueueVerdict.REJECT, f"waits for quota in ClusterQueue {cq_name}: {result.reason}")

    def overused(self, queue: str) -> tuple[bool, str]:
        """Holding more than it may now: above its nominal quota and beyond what its cohort can lend it now.

        A queue within its nominal quota is never overused: Kueue guarantees
        nominal quota, and the borrower is the one to give back.
        """
        cq_name = self.cluster_queue(queue)
        if cq_name is None:
            if inactive := self.inactive(queue):
                return True, inactive  # holds more than it may: nothing
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

    def victims(self, job: BoundJob, now: float) -> VictimsAnswer:
        """The jobs whose quota ``job`` may take for what it still misses (Kueue's preemption in its ClusterQueue)."""
        cq_name = self.cluster_queue(job.queue)
        if cq_name is None:
            if inactive := self.inactive(job.queue):
                return VictimsAnswer(QueueVerdict.REJECT, frozenset(), inactive)
            return VictimsAnswer(
                QueueVerdict.ABSTAIN, frozenset(), f"queue {job.queue} is bound to no ClusterQueue kilter knows"
            )
        cq = self.tree.cluster_queues[cq_name]
        missing = {
            r: v - job.holding.get(r, 0) for r, v in bound_jobs.requests(job).items() if v > job.holding.get(r, 0)
        }
        with self._lifted(job, cq) as admitted:
            assignment = assign_flavors(cq, missing)
            if assignment.mode == "fit":
                return VictimsAnswer(
                    QueueVerdict.ABSTAIN, frozenset(), f"fits ClusterQueue {cq_name} without taking anyone's quota"
                )
            if assignment.mode == "nofit":
                return VictimsAnswer(QueueVerdict.REJECT, frozenset(), f"can never be admitted: {assignment.reason}")
            result = self._targets(job, cq, usage=assignment.usage, admitted=admitted, now=now)
        keys = frozenset(t.workload.key for t in result.targets)
        if not keys:
            return VictimsAnswer(QueueVerdict.REJECT, keys, f"no job's quota may go to it: {result.reason}")
        return VictimsAnswer(QueueVerdict.PERMIT, keys, f"quota may be taken from {', '.join(sorted(keys)[:5])}")


def _flavors(flavors: Mapping[str, str]) -> str:
    return ", ".join(f"{r} in {f}" for r, f in sorted(flavors.items())) or "nothing to charge"
