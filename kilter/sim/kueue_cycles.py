"""Kueue's admission as the simulation's admission step: its cycles, flavor by flavor, with preemption.

Each pass runs Kueue's cycles (``engine``'s module docstring says how): every
ClusterQueue nominates its head, the quota engine orders the nominees and
each is admitted when a flavor has quota and the placement policy places
its gang there; one short of quota preempts what the quota engine picks,
when the gang then places.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kilter.quota.admit import nominee_order
from kilter.quota.available import add_usage, available, remove_usage
from kilter.quota.preempt import find_targets
from kilter.quota.shares import Shares
from kilter.sim.gangs import Gang
from kilter.sim.parts import UNBOUNDED
from kilter.sim.placement import Nodes

if TYPE_CHECKING:
    from kilter.sim.engine import Simulation

__all__ = ["KueueCycles"]


class KueueCycles:
    """Kueue's cycles over the engine's queues (``parts.AdmissionStep``)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def schedule(self, now: float) -> None:
        """One pass of Kueue cycles until no queue has a head left below its bound."""
        sim = self.sim
        cq_bound = sim._cq_bound
        tree = sim.queues.tree
        while sim._waiting:
            heads = {}
            for cq in sim.cq_names:
                j = sim._head(cq, cq_bound[cq])
                if j is not None:
                    heads[cq] = sim._info(j)
            if not heads:
                return
            for info, _ in nominee_order(tree, heads, config=sim.fair, now=now):
                j = int(info.uid)
                if self.admit(j, now):
                    sim._unqueue(info.cluster_queue, j)
                    sim._waiting -= 1
                elif j not in sim._parked:  # a parked gang fitted: it bounds nothing
                    cq_bound[info.cluster_queue] = min(cq_bound[info.cluster_queue], sim.jobs[j].gpus)

    def admit(self, j: int, now: float) -> bool:
        """Start job ``j`` on the first of its flavors with quota and room (or after preempting); did it start?"""
        sim = self.sim
        job = sim.jobs[j]
        cq = sim.queues.tree.cluster_queues[sim.cq_of[j]]
        place_bound = sim._place_bound
        reserved = sim.hold.reserved.pop(j, None) if sim.hold is not None else None
        if reserved is not None:  # a held gang's own reservation is no obstacle to it
            sim._uncharge(j, cq.name, fr=reserved, gpus=job.gpus)
        held: tuple[str, str] | None = None
        for platform, flavor in sim.queues.flavors[cq.name]:
            if job.gpus >= place_bound.get(platform, UNBOUNDED):
                continue
            p = sim.fleet.platforms[platform]
            fr = (flavor, p.device_resource)
            gang = sim._gang(j, platform)
            if available(cq, fr) < job.gpus:
                nodes = self.preempt(j, gang, cq.name, fr, now) if cq.preemption is not None else None
            else:
                nodes = sim._place(gang, now) if sim._free_on(platform) >= gang.gpus else None
                if nodes is None and not sim.turned_away():
                    place_bound[platform] = min(place_bound.get(platform, UNBOUNDED), job.gpus)
            if nodes is not None and not sim._holds(gang, nodes, now):
                sim._start(j, gang, nodes, cq.name, fr, now)
                return True
            held = held or (fr if nodes is not None else None)
        if held is not None and sim.hold is not None and sim.hold.keeps_quota_of(j):
            sim._charge(j, cq.name, fr=held, gpus=job.gpus)  # admitted by quota, waiting for its placement
            sim.hold.reserved[j] = held
        elif reserved is not None:  # its quota went back without a start: what it blocked may fit now
            sim._place_bound.clear()
            sim._cq_bound.update(dict.fromkeys(sim.cq_names, UNBOUNDED))
        return False

    def preempt(self, j: int, gang: Gang, cq: str, fr: tuple[str, str], now: float) -> Nodes | None:
        """Where job ``j`` goes after evicting what the quota engine picks, or None (and nothing evicted).

        Targets are evicted only when the gang then places on what they free,
        as Kueue's TAS checks the topology of a preemption's outcome; an
        eviction that would not let the gang start would only waste work.
        """
        sim = self.sim
        tree = sim.queues.tree
        admitted = {name: list(infos.values()) for name, infos in sim._admitted.items()}
        result = find_targets(
            tree,
            admitted,
            tree.cluster_queues[cq],
            sim._info(j),
            {fr: gang.gpus},
            config=sim.fair,
            shares=Shares(tree, now=now),
            now=now,
        )
        return sim._evict_and_place(gang, [int(t.workload.uid) for t in result.targets], now=now)

    def charge(self, j: int, cq: str, *, fr: tuple[str, str], gpus: int) -> None:
        """Job ``j`` started: its ClusterQueue holds its GPUs of ``fr``."""
        add_usage(self.sim.queues.tree.cluster_queues[cq], fr, gpus)

    def uncharge(self, j: int, cq: str, *, fr: tuple[str, str], gpus: int) -> None:
        """Job ``j`` ended or was evicted: what ``charge`` booked goes."""
        remove_usage(self.sim.queues.tree.cluster_queues[cq], fr, gpus)

    def capacity_grew(self) -> None:
        """Nothing of its own to forget: the engine's bounds are the cycles' bounds."""

    def withdraw(self, j: int) -> bool:
        """A waiting job is in the engine's queue until it starts: nothing of the cycles' holds it."""
        return False
