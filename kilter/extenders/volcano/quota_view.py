"""The quota view the Volcano verbs decide on, cached per (state version, session serial).

The view (``kilter.quota.bound_queues.BoundQueues``) is built from the
cluster's ClusterQueues and Cohorts (``--queues FILE`` winning by name), the
jobs of the open session (else the PodGroups of the state), the jobs kilter
permitted and the tasks allocated in this session. Building it costs a pass
over every job, so it is rebuilt only when the state or the session changes;
permits and allocations in between are applied to the cached view and
recorded in the session, which replays them when the view is rebuilt.

A ClusterQueue the view finds inactive (a cohort cycle above it) is logged
once per change of that set: its queues' jobs are refused from then on
(``BoundQueues.inactive``), and that must not pass unseen.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from kilter.extenders.volcano import wire as vw
from kilter.extenders.volcano.notes import Notes
from kilter.extenders.volcano.quota_jobs import (
    build_view,
    from_resource,
    job_from_info,
    jobs_from_state,
    queue_annotations,
)
from kilter.extenders.volcano.session import Placed, Sessions
from kilter.model.errors import InputError, KilterError
from kilter.model.kueue import ClusterQueue, Cohort, ResourceFlavor
from kilter.quota.bound_jobs import BoundJob
from kilter.quota.bound_queues import BoundQueues, VictimsAnswer
from kilter.quota.config import FairSharingConfig
from kilter.state.store import ClusterStore

__all__ = ["QuotaViews", "offered_victims"]

log = logging.getLogger("kilter.volcano")


class QuotaViews:
    """The current quota view, and the state's jobs, each rebuilt only when what it is made of changed."""

    def __init__(
        self,
        store: ClusterStore,
        sessions: Sessions,
        *,
        queues: Sequence[ClusterQueue | Cohort | ResourceFlavor],
        config: FairSharingConfig,
        notes: Notes,
    ) -> None:
        self.store = store
        self.sessions = sessions
        self.queues = queues
        self.config = config
        self.notes = notes
        self._view: tuple[tuple[int, int], BoundQueues] | None = None
        self._state_jobs: tuple[int, dict[str, BoundJob]] | None = None
        self._inactive: tuple[str, ...] = ()  # the inactive ClusterQueues last logged

    def current(self) -> BoundQueues:
        key = (self.store.version, self.sessions.serial)
        if self._view is None or self._view[0] != key:
            self._view = (key, self._build())
        return self._view[1]

    def _build(self) -> BoundQueues:
        state = self.store.state()
        session = self.sessions.current
        # A session holds every job whose queue exists, fresher than the state: then the state adds nothing.
        if session is not None:
            jobs = {}
            for k, info in session.jobs.items():
                try:
                    jobs[k] = job_from_info(info)
                except KilterError as exc:  # one unreadable job must not take quota away from all the others
                    self.notes.add(k, "unreadable", str(exc))
        else:
            jobs = dict(self._jobs_from_state())
        annotations = queue_annotations(state, self.sessions.queues())
        view = build_view(
            state,
            self.queues,
            jobs=jobs,
            annotations=annotations,
            permitted=self.sessions.permitted,
            config=self.config,
        )
        for job_key, asks, node in self.sessions.placed.values():
            view.place(job_key, asks, node, taken=True)
        inactive = tuple(
            f"{n.name} ({n.inactive_reason}): {n.inactive_message}" for n in view.tree.inactive_cluster_queues()
        )
        if inactive != self._inactive:
            for line in inactive:
                log.warning("ClusterQueue %s; the jobs of its Volcano queues are refused", line)
            self._inactive = inactive
        return view

    def _jobs_from_state(self) -> dict[str, BoundJob]:
        if self._state_jobs is None or self._state_jobs[0] != self.store.version:
            self._state_jobs = (self.store.version, jobs_from_state(self.store.state()))
        return self._state_jobs[1]

    def permit(self, job: BoundJob) -> None:
        """Volcano may enqueue ``job``: charged from now on, in this view and the ones rebuilt after it."""
        self.sessions.permitted[job.key] = job
        self.current().permit(job)

    def take(self, uid: str, placed: Placed) -> str:
        """Task ``uid`` was allocated: why quota refuses it ("" when it may, and is then charged)."""
        if uid in self.sessions.placed:
            return ""
        refused = self.current().place(placed.job, placed.asks, placed.node, taken=True)
        if not refused:
            self.sessions.placed[uid] = placed
        return refused

    def give_back(self, uid: str) -> None:
        """Task ``uid`` was deallocated: what it took in this session is free again."""
        placed = self.sessions.placed.pop(uid, None)
        if placed is not None:
            self.current().place(placed.job, placed.asks, placed.node, taken=False)

    def evictor(self, task: vw.TaskHead) -> BoundJob:
        """The job of a preemptable/reclaimable evictor: from the session, else the view, else its task alone."""
        if not task.job:
            raise InputError("evictor has no Job")
        info = self.sessions.job(task.job)
        if info is not None:
            return job_from_info(info)
        known = self.current().jobs.get(task.job)
        if known is not None:
            return known
        asks = from_resource(task.resreq)
        return BoundJob(task.job, task.uid, "", task.priority, 0.0, "", {}, asks)


def offered_victims(
    view: BoundQueues,
    answer: VictimsAnswer,
    evictor: BoundJob,
    offered: Iterable[tuple[vw.TaskHead, bytes]],
    *,
    cross_queue: bool,
) -> list[bytes]:
    """The offered evictees (as received) whose jobs quota lets ``evictor`` take from.

    preemptable (``cross_queue`` False) keeps those of the evictor's own ClusterQueue, reclaimable those of others.
    """
    kept = []
    evictor_cq = view.cluster_queue(evictor.queue)
    for task, item in offered:
        victim = view.jobs.get(task.job)
        if task.job not in answer.keys or victim is None:
            continue
        same = view.cluster_queue(victim.queue) == evictor_cq
        if same != (not cross_queue):
            continue
        kept.append(item)
    return kept
