"""Kueue's ClusterQueues as Volcano Queues: the simulation with admission decided by the Volcano verbs' rules.

``kueue_cycles`` runs Kueue's admission cycles; this admission step runs a
Volcano session instead, on every scheduling pass: the enqueue action asks
``jobEnqueueable``'s rule of pending jobs in submit order, then the allocate
action starts each enqueued job whose gang the placement policy places and
whose tasks ``allocateFunc``'s quota gate lets take the GPUs, skipping
queues that ``queueOverused`` says hold more than they may; a job that
finds no nodes asks for victims as ``reclaimable``/``preemptable`` do and
starts on what evicting them frees, as the engine does for Kueue's
preemption (victims are evicted only when the gang then places). The rules
are ``kilter.quota.bound_queues``'s; how trace jobs become Volcano jobs is
in ``volcano_queues``. Rejections are remembered per queue and job size
until a job ends (or a node comes back), as the engine remembers Kueue's. A gang the split-wait
rule holds back stays enqueued (and charged, as Volcano charges enqueued
jobs) and reclaims nothing; the allocate action skips it while it is parked.
"""

from __future__ import annotations

from bisect import insort
from typing import TYPE_CHECKING

from kilter.quota.bound_queues import QueueVerdict
from kilter.sim.gangs import Gang
from kilter.sim.parts import UNBOUNDED
from kilter.sim.placement import Nodes
from kilter.sim.volcano_queues import VolcanoQueues

if TYPE_CHECKING:
    from kilter.sim.engine import Simulation

__all__ = ["VolcanoSession"]


class VolcanoSession:
    """Volcano's enqueue and allocate actions over the engine's queues (``parts.AdmissionStep``)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._bound = VolcanoQueues(sim.fleet, sim.jobs, queues=sim.queues, config=sim.fair)
        self._inqueue: list[int] = []  # enqueued, not started yet, in job order
        self._reclaim_bound: dict[str, int] = dict.fromkeys(sim.cq_names, UNBOUNDED)

    def schedule(self, now: float) -> None:
        """Volcano's session: enqueue what quota permits, then allocate (reclaiming where quota says so)."""
        while self.sim._waiting and (self._enqueue_action(now) | self._allocate_action(now)):
            pass

    def _enqueue_action(self, now: float) -> bool:
        """Ask ``enqueueable`` for pending jobs in submit order until every queue's head waits; any enqueued?"""
        cq_bound = self.sim._cq_bound
        enqueued = False
        while True:
            heads = [(j, cq) for cq in self.sim.cq_names if (j := self.sim._head(cq, cq_bound[cq])) is not None]
            if not heads:
                return enqueued
            j, cq = min(heads)
            if self._bound.enqueue(j, now).status == QueueVerdict.PERMIT:
                self.sim._unqueue(cq, j)
                insort(self._inqueue, j)
                enqueued = True
            else:  # until a job ends, quota only fills: no larger job of this queue is permitted either
                cq_bound[cq] = min(cq_bound[cq], self.sim.jobs[j].gpus)

    def _allocate_action(self, now: float) -> bool:
        """Start every enqueued job whose gang places (after reclaiming, if quota names victims); any started?"""
        started = [j for j in list(self._inqueue) if self._allocate(j, now)]
        for j in started:
            self._inqueue.remove(j)
            self.sim._waiting -= 1
        return bool(started)

    def _allocate(self, j: int, now: float) -> bool:
        job = self.sim.jobs[j]
        cq = self.sim.cq_of[j]
        if self._bound.overused(cq) or j in self.sim._parked:  # Volcano skips a queue that holds more than it may
            return False
        platforms = self._bound.platforms(j)
        for platform, flavor in platforms:
            if job.gpus >= self.sim._place_bound.get(platform, UNBOUNDED):
                continue
            gang = self.sim._gang(j, platform)
            nodes = self.sim.policy.place(self.sim.fleet, gang) if self.sim._free_on(platform) >= gang.gpus else None
            if nodes is None:
                self.sim._place_bound[platform] = min(self.sim._place_bound.get(platform, UNBOUNDED), job.gpus)
            elif self.sim._holds(gang, nodes, now):
                continue
            elif self._volcano_start(
                j, gang, nodes=nodes, fr=(flavor, self.sim.fleet.platforms[platform].device_resource), now=now
            ):
                return True
        if job.gpus >= self._reclaim_bound[cq] or j in self.sim._parked:  # a parked gang fitted: no need to reclaim
            return False
        victims = [v for v in self._bound.victims(j, now) if v in self.sim._booked]
        for platform, flavor in platforms if victims else ():
            gang = self.sim._gang(j, platform)
            nodes = self.sim._evict_and_place(gang, victims, now=now)
            if nodes is not None:
                return self._volcano_start(
                    j, gang, nodes=nodes, fr=(flavor, self.sim.fleet.platforms[platform].device_resource), now=now
                )
        if j not in self.sim._parked:
            self._reclaim_bound[cq] = min(self._reclaim_bound[cq], job.gpus)
        return False

    def _volcano_start(self, j: int, gang: Gang, *, nodes: Nodes, fr: tuple[str, str], now: float) -> bool:
        """Start job ``j`` on ``nodes`` if ``allocateFunc``'s quota gate lets its tasks take them there."""
        if self._bound.take(j, fr[1], node=self.sim.fleet.node_names[int(nodes[0])]):
            if self.sim._release is not None:
                self.sim._release(j)
            return False
        self.sim._start(j, gang, nodes, self.sim.cq_of[j], fr, now)
        return True

    def charge(self, j: int, cq: str, *, fr: tuple[str, str], gpus: int) -> None:
        """Nothing to book: the job was charged its minimum at enqueue, moved to ``fr`` by ``take``."""

    def uncharge(self, j: int, cq: str, *, fr: tuple[str, str], gpus: int) -> None:
        """Job ``j`` ended or was evicted: its queue's charge goes, and what found no victims may find some now."""
        self._bound.release(j)
        self._reclaim_bound.update(dict.fromkeys(self.sim.cq_names, UNBOUNDED))

    @property
    def charged(self) -> int:
        """How many jobs the queues hold a charge for now (enqueued or running)."""
        return len(self._bound.view.jobs)

    def withdraw(self, j: int) -> bool:
        """An enqueued job leaves the session with its queue's charge (what found no victims may find some now)."""
        if j not in self._inqueue:
            return False
        self._inqueue.remove(j)
        self._bound.release(j)
        self._reclaim_bound.update(dict.fromkeys(self.sim.cq_names, UNBOUNDED))
        return True

    def capacity_grew(self) -> None:
        """A node came back (or a gang ended): a job that found no victims may place on what they free now."""
        self._reclaim_bound.update(dict.fromkeys(self.sim.cq_names, UNBOUNDED))
