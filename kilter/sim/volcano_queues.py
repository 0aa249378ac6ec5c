"""``--quota volcano``: trace jobs as Volcano jobs of Queues bound to the queue file's ClusterQueues.

The simulator decides admission with the rules the Volcano verbs enforce,
``kilter.quota.bound_queues``, instead of Kueue's admission cycle:

- Each ClusterQueue of the queue file stands for a Volcano Queue of the
  same name bound to it; a trace job is a PodGroup in that queue.
- A job's ``minResources`` are all its GPUs, as one gang (``minMember`` is
  every pod): it is enqueued only when ``enqueueable`` permits, and from
  then on is charged that much, as Volcano reserves ``minResources`` for an
  enqueued job. Jobs are asked in submit order (priority is 0 for all).
- A job asks for one GPU kind (a PodGroup's ``minResources`` name one
  resource, and its tasks hold the same): the first device resource of its
  ClusterQueue's platforms, in flavor order, for which ``enqueueable``
  permits it, as a user submits where there is quota. It then runs only on
  the ClusterQueue's platforms of that kind, and is asked again, from the
  first kind, once evicted.
- An enqueued job starts when the placement policy finds nodes for the whole
  gang on one of those platforms (flavor order) and ``place``
  lets its tasks take the GPUs there; its usage then moves to the flavor of
  that platform, as ``allocateFunc`` charges it. The gang's tasks are booked
  at once (one ``place`` of all its GPUs): Volcano commits a gang's
  allocations together or rolls them all back.
- The jobs of a queue that ``overused`` says holds more than it may (a
  borrower whose lender took back its nominal) wait, as Volcano's allocate
  and reclaim actions skip overused queues.
- An enqueued job that finds no nodes asks ``victims`` (Volcano's reclaim
  across queues and preempt within one, which both call it); the running
  jobs it names are evicted when the gang then places on what they free.
  An evicted job loses its reservation and must be enqueued again.
- A job that ends or is evicted is ``release``-d: its charge goes.

Victims that are enqueued but not running hold no tasks Volcano could
offer, so they are never evicted. That is a way to stall, and the replay
shows it rather than hiding it: ``enqueueable`` may permit a job "once
reclaimed" from such reservations, its queue then holds more than it may,
and if nothing of it runs to give back, its jobs wait for good (under heavy
load on the demo queues, some jobs never finish; ``completed`` says how
many did).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kilter.quota.bound_jobs import BoundJob
from kilter.quota.bound_queues import BoundQueues, EnqueueAnswer, QueueVerdict
from kilter.quota.config import FairSharingConfig
from kilter.sim.queues import QueueSetup
from kilter.sim.trace import TraceJob
from kilter.topology.fleet import Fleet

__all__ = ["PlatformFlavors", "VolcanoQueues", "job_key"]

NAMESPACE = "sim"


def job_key(j: int) -> str:
    """Job ``j``'s key as the quota rules see it (a PodGroup ``sim/job-<j>``)."""
    return f"{NAMESPACE}/job-{j}"


@dataclass(frozen=True)
class PlatformFlavors:
    """``FlavorMatch`` for the simulated fleet: a node matches the flavors that stand for its platform."""

    fleet: Fleet
    platforms: Mapping[str, frozenset[int]]  # flavor -> the platforms it stands for

    @classmethod
    def of(cls, fleet: Fleet, queues: QueueSetup) -> PlatformFlavors:
        found: dict[str, set[int]] = {}
        for pairs in queues.flavors.values():
            for platform, flavor in pairs:
                found.setdefault(flavor, set()).add(platform)
        return cls(fleet, {f: frozenset(p) for f, p in found.items()})

    def node_matches(self, node: str, flavor: str) -> bool:
        index = self.fleet.node_index.get(node)
        if index is None:
            return False
        platform = int(self.fleet.bitmap.domain_platforms[self.fleet.node_domain[index]])
        return platform in self.platforms.get(flavor, frozenset())


class VolcanoQueues:
    """The bound-queue view of one simulation, and the trace jobs as its records."""

    def __init__(
        self, fleet: Fleet, jobs: Sequence[TraceJob], *, queues: QueueSetup, config: FairSharingConfig
    ) -> None:
        self.fleet = fleet
        self.jobs = jobs
        self.queues = queues
        binding = {cq: cq for cq in queues.cluster_queues}
        self.view = BoundQueues.build(
            queues.tree, {}, binding=binding, flavors=PlatformFlavors.of(fleet, queues), permitted={}, config=config
        )
        self._index = {job_key(j): j for j in range(len(jobs))}

    def kinds(self, j: int) -> list[str]:
        """The GPU kinds job ``j`` may ask for: its ClusterQueue's platforms' device resources, in flavor order."""
        pairs = self.queues.flavors[self.queues.queue_of[self.jobs[j].queue]]
        return list(dict.fromkeys(self.fleet.platforms[p].device_resource for p, _ in pairs))

    def platforms(self, j: int) -> list[tuple[int, str]]:
        """The (platform, flavor) pairs job ``j`` may run on, in flavor order: those of the GPU kind it asks for."""
        (resource,) = self.record(j).minimum
        pairs = self.queues.flavors[self.queues.queue_of[self.jobs[j].queue]]
        return [(p, f) for p, f in pairs if self.fleet.platforms[p].device_resource == resource]

    def record(self, j: int, resource: str = "") -> BoundJob:
        """Job ``j`` as the quota rules see it: the one they hold, or its pending PodGroup asking for ``resource``
        (default: the first kind it may ask for)."""
        known = self.view.jobs.get(job_key(j))
        if known is not None:
            return known
        job = self.jobs[j]
        cq = self.queues.queue_of[job.queue]
        return BoundJob(
            key=job_key(j),
            uid=f"{j:09d}",
            queue=cq,
            priority=0,
            created_s=job.submit_s,
            phase="Pending",
            holding={},
            minimum={resource or (self.kinds(j) or ["gpu"])[0]: job.gpus},
            reserves=True,
        )

    def enqueue(self, j: int, now: float) -> EnqueueAnswer:
        """``jobEnqueueable`` for job ``j``, per GPU kind until one permits; a permitted job is charged at once.

        The answer is the permitting kind's, else the first kind's rejection.
        """
        first: EnqueueAnswer | None = None
        for resource in self.kinds(j) or ["gpu"]:
            job = self.record(j, resource)
            answer = self.view.enqueueable(job, now)
            if answer.status == QueueVerdict.PERMIT:
                self.view.permit(job)
                return answer
            first = first or answer
        assert first is not None
        return first

    def take(self, j: int, resource: str, *, node: str) -> str:
        """``allocateFunc`` for the whole gang on ``node``'s platform: why quota refuses it ("" once charged)."""
        return self.view.place(job_key(j), {resource: self.jobs[j].gpus}, node, taken=True)

    def victims(self, j: int, now: float) -> list[int]:
        """The jobs whose quota job ``j`` may take (``reclaimable`` and ``preemptable``), by index."""
        answer = self.view.victims(self.record(j), now)
        if answer.status != QueueVerdict.PERMIT:
            return []
        return sorted(self._index[k] for k in answer.keys if k in self._index)

    def overused(self, cq: str) -> bool:
        """``queueOverused`` for the Volcano Queue of ClusterQueue ``cq``."""
        return self.view.overused(cq)[0]

    def release(self, j: int) -> None:
        self.view.release(job_key(j))
