"""The simulation with node failures: what a failed node costs the gang on it, and how each policy recovers it.

Nodes fail and come back as ``failure_model.NodeClock`` says. A gang with a
pod on a node that fails loses that pod at once, and the whole gang rolls
back to its last checkpoint: it checkpoints every ``checkpoint_s`` of its
run time (counted from when it last started computing), so the run time
since its last checkpoint is lost, on all its GPUs. Its other pods keep
their nodes unless the policy evicts the gang. Recovery, by policy:

* ``kilter``: the lost pods are placed again at once by
  ``topology.repair.repair`` (own node, own scale-up domain, nearest domain
  the gang uses, a new one), as many as were lost, spares included. If the
  repair finds no room the gang keeps its surviving nodes and its quota and
  tries again whenever capacity grows (a gang ends or is evicted, a node
  comes back), before new gangs are admitted: a real job's replacement pods
  stay Pending while its Workload stays admitted. The wait ends at the
  latest when the failed node itself returns (the first rung of the ladder),
  so it is bounded by the repair time; evicting instead would give up the
  survivors' nodes and send the gang to the back of a loaded queue.
* ``kueue-tas``: Kueue's node hot swap with its recommended gates
  (``TASFailedNodeReplacement``, ``TASReplaceNodeOnPodTermination``,
  ``TASFailedNodeReplacementFailFast``): one failed node is replaced by a
  node of the same domain at the requested level (here the scale-up domain;
  any node for an ``unconstrained`` request), Kueue's BestFit: fewest free
  GPUs that hold the pod, lowest index. No such node: the workload is
  evicted and requeued at once (FailFast tries once). A second node of the
  workload failing while a replacement is pending (here: before the gang
  computes again) evicts it too.
* ``requeue``: every failure evicts the whole gang and sends it back
  through the queue.
* ``kilter-replan`` (an experiment, not what the servers do): kilter's
  repair when it keeps the gang in the domains it uses (own node, own
  domain, a domain of the gang), else the gang is requeued and planned again
  whole, so a repair never adds a domain and a gang never waits holding its
  survivors.

An evicted gang goes back to its place in its queue (by submission) and,
when admitted again, resumes from its last checkpoint; its wait stays the
wait for its first start (the time back in the queue is in its JCT and its
time to resume). Every resume, after a
repair, a swap or a new admission, takes ``restart_s`` before the gang
computes again; the gang holds its nodes meanwhile. Preemption is unchanged
from ``engine``: a preempted gang starts over.

What is counted (``metrics``): GPU-seconds held by gangs (booked GPUs,
whether computing, restarting or waiting for a repair), GPU-seconds of work
lost to failures, repairs placed and how many stayed in the failed node's
domain, and, per failure that stopped a running gang, the time until it
computed again.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from kilter.sim.failure_model import FailureClock, FailureSettings, NodeClock
from kilter.sim.gangs import Gang
from kilter.sim.parts import Part
from kilter.sim.placement import Nodes, free_gpus
from kilter.topology import repair
from kilter.topology.plan import LEVEL_DOMAIN

if TYPE_CHECKING:
    from kilter.sim.engine import Simulation

__all__ = ["FailureStats", "NodeFailures"]


@dataclass
class FailureStats:
    """What failures did in one run (counts and GPU-seconds; ``resume_s`` one entry per stopped gang)."""

    injected: int = 0
    gangs_hit: int = 0
    evictions: int = 0
    evictions_second_failure: int = 0  # kueue-tas: a second node failed while a replacement was pending
    repairs: int = 0
    repairs_same_domain: int = 0
    lost_gpu_s: float = 0.0
    resume_s: list[float] = field(default_factory=list)


@dataclass
class _Progress:
    """A started gang's work: unslowed seconds still to do as of its last checkpoint, its placement's slowdown
    factor, when its current run began computing (inf: it is not computing), and when the failure that stopped
    it struck (None: it was not stopped, or has resumed). ``token`` names its one scheduled resume that still
    holds; tokens are unique over the run, so a resume scheduled for an earlier start never matches a later one."""

    work_left_s: float
    factor: float
    computing_from: float
    token: int
    hit_s: float | None = None


class NodeFailures(Part):
    """Nodes failing and returning under a run's gangs, the gangs' checkpoints, and each policy's recovery (module
    docstring); a maintenance rollout's kills use the same checkpoints (``maintenance``)."""

    def __init__(self, sim: Simulation, settings: FailureSettings, *, clock: FailureClock | None = None) -> None:
        """``clock`` replaces the seeded failures of ``settings`` (tests script failures with it)."""
        self.sim = sim
        self.settings = settings
        self.recovery = settings.policy_for(sim.policy.name)
        self.clock = clock or NodeClock(sim.fleet.bitmap.node_usable_flags != 0, settings)
        self.injects_failures = math.isfinite(self.settings.node_mtbf_h)  # else: checkpoints for maintenance only
        self.stats = FailureStats()
        self.progress: dict[int, _Progress] = {}
        self._resumes: list[tuple[float, int, int]] = []  # (time, job, token)
        self._missing: dict[int, list[tuple[int, int]]] = {}  # kilter: job -> (pod, failed node) awaiting repair
        self._requeued: set[int] = set()  # evicted by a failure: resume from the checkpoint when started again
        self._first_start: dict[int, float] = {}  # a requeued gang's first start (its wait ended there)
        self._may_repair = False  # capacity grew since the last repair attempt
        self._tokens = itertools.count()
        self._now = 0.0
        self._idle_from = math.inf  # since when no GPU has been booked (inf: some are)
        self.keep_out: list[Callable[[int], bool]] = []  # a returning node stays out while one says so (a rollout)

    # ------------------------------------------------------------------ the engine's moments

    def next_event_s(self) -> float:
        return min(self.clock.next_s(), self._resumes[0][0] if self._resumes else math.inf)

    def holding(self) -> bool:
        """A gang awaits its repair; or gangs wait in the queue while nodes are down, and either something runs or
        the fleet has been idle for less than a repair time (after that, whatever still waits only fits a fleet
        with no node down, which failures may never leave it: the run ends, as without failures)."""
        if self._missing:
            return True
        if not (self.sim._waiting and self.clock.down):
            return False
        return self.sim._used > 0 or self._now - self._idle_from <= self.settings.repair_h * 3600.0

    def on_events(self, now: float) -> None:
        self._now = now
        self._idle_from = math.inf if self.sim._used > 0 else min(self._idle_from, now)
        while self._resumes and self._resumes[0][0] <= now:
            _, j, token = heapq.heappop(self._resumes)
            p = self.progress.get(j)
            if p is not None and p.token == token:
                self._resume(j, p, now)
        while self.clock.next_s() <= now:
            _, node, fails = self.clock.pop()
            if fails:
                self._fail(node, now)
            else:
                self._come_back(node)

    def before_schedule(self, now: float) -> None:
        """Gangs waiting for their repair try again before new gangs are admitted, when capacity grew."""
        if self._missing and self._may_repair:
            self._may_repair = False
            for j in list(self._missing):
                self._try_repair(j, now)

    def started(self, j: int, gang: Gang, nodes: Nodes, now: float) -> None:
        _, _, fr = self.sim._booked[j]
        self.sim._booked[j] = (gang, nodes.copy(), fr)  # failures edit the pods' nodes in place
        factor = self.sim._slowdown(gang, nodes)[0]
        if j in self._requeued:
            self._requeued.discard(j)
            self.sim.outcome.start[j] = self._first_start.pop(j)  # its wait is for its first start; JCT runs on
            self._drop_end(j)  # the engine booked its end for the whole duration; _restart books the real one
            p = self.progress[j]
            p.factor = factor
            self.sim._useful -= self.sim._weight[j]
            self.sim._weight[j] = 0.0
            self._restart(j, p, now)
        else:
            self.progress[j] = _Progress(self.sim.jobs[j].duration_s, factor, now, next(self._tokens))

    def finished(self, j: int) -> None:
        """Its gang left its nodes (capacity grew, so waiting repairs try again): it awaits no repair."""
        self._missing.pop(j, None)
        if j not in self._requeued:  # it ended, or was preempted (and starts over, as engine says)
            self.progress.pop(j, None)

    # ------------------------------------------------------------------ failures

    def _fail(self, node: int, now: float) -> None:
        self.stats.injected += 1
        bm = self.sim.fleet.bitmap
        hit = sorted(j for j, (_, nodes, _) in self.sim._booked.items() if node in nodes)
        bm.set_usable(node, False)
        self.sim._usable_gpus = int(bm.domain_usable_gpus.sum())
        for j in hit:
            gang, nodes, _ = self.sim._booked[j]
            pod = int(np.flatnonzero(nodes == node)[0])
            gpus = gang.pod_gpus()[pod]
            bm.release(node, gpus)
            nodes[pod] = -1
            self.sim._used -= gpus
            p = self.progress[j]
            pending = p.hit_s is not None
            self._stop(j, gang, p, now)
            if self.recovery == "requeue" or (self.recovery == "kueue-tas" and pending):
                self.stats.evictions_second_failure += self.recovery == "kueue-tas"
                self._evict(j)
            elif self.recovery == "kueue-tas":
                self._swap(j, pod, node, now)
            else:
                self._missing.setdefault(j, []).append((pod, node))
                self._try_repair(j, now)

    def _come_back(self, node: int) -> None:
        """A repaired node is usable again, unless a part keeps it out (a rollout, until its domain is back)."""
        if any(out(node) for out in self.keep_out):
            return
        bm = self.sim.fleet.bitmap
        bm.set_usable(node, True)
        self.sim._usable_gpus = int(bm.domain_usable_gpus.sum())
        self.sim._capacity_grew()

    def capacity_grew(self) -> None:
        """What did not fit may fit now: waiting repairs try again."""
        self._may_repair = True

    def _stop(self, j: int, gang: Gang, p: _Progress, now: float) -> None:
        """The gang stops computing: the run time since its last checkpoint is lost, on all its GPUs."""
        self.stats.lost_gpu_s += self.halt(j, gang, p, now)
        if p.hit_s is None:
            p.hit_s = now
            self.stats.gangs_hit += 1

    def halt(self, j: int, gang: Gang, p: _Progress, now: float) -> float:
        """The gang stops computing, rolled back to its last checkpoint; the GPU-seconds of work that loses (what
        a failure or a maintenance kill costs, counted by the caller)."""
        lost = 0.0
        if p.computing_from <= now:
            ran = now - p.computing_from
            every = self.settings.checkpoint_s
            kept = ran // every * every if every > 0 else 0.0
            p.work_left_s = p.work_left_s - kept / p.factor if every > 0 else self.sim.jobs[j].duration_s
            lost = gang.gpus * (ran - kept)
            self.sim.timeline.useful_gpu_s -= lost / p.factor
            self.sim._useful -= self.sim._weight[j]
            self.sim._weight[j] = 0.0
        p.computing_from = math.inf
        p.token = next(self._tokens)
        self._drop_end(j)
        self.sim.outcome.end[j] = math.inf  # it ends nowhere until it computes again
        return lost

    def _evict(self, j: int) -> None:
        """Back to the queue after a failure, keeping its checkpoint (``_start`` resumes from it)."""
        self.stats.evictions += 1
        self.requeue(j)

    def requeue(self, j: int) -> None:
        """Back to the queue, keeping its checkpoint (``_start`` resumes from it)."""
        self._requeued.add(j)
        self.sim._finish(j)
        o = self.sim.outcome
        self._first_start.setdefault(j, float(o.start[j]))
        o.start[j] = o.end[j] = o.run[j] = np.nan
        self.sim._enqueue(j)

    def _swap(self, j: int, pod: int, failed: int, now: float) -> None:
        """Kueue's hot swap: the best-fitting node of the failed node's domain, or eviction (FailFast)."""
        gang = self.sim._booked[j][0]
        gpus = gang.pod_gpus()[pod]
        free = free_gpus(self.sim.fleet)
        room = free >= gpus
        if gang.topology != "unconstrained":
            room &= self.sim.fleet.node_domain == self.sim.fleet.node_domain[failed]
        else:
            room &= self.sim._platform_domains[gang.platform][self.sim.fleet.node_domain]
        fits = np.flatnonzero(room)
        if not len(fits):
            self._evict(j)
            return
        node = int(fits[np.argmin(free[fits])])
        self._place_pod(j, pod, node, failed)
        self._restart(j, self.progress[j], now)

    def _try_repair(self, j: int, now: float) -> None:
        """kilter's repair of every pod the gang lost, all at once or not at all (``topology.repair``); a gang that
        requires one domain keeps to the one holding most of its survivors, as the servers' repairs do."""
        gang, nodes, _ = self.sim._booked[j]
        lost = self._missing[j]
        pod_gpus = gang.pod_gpus()
        wanted = [repair.Replacement(pod_gpus[pod], home) for pod, home in lost]
        survivors = nodes[nodes >= 0].tolist()
        keep = repair.within_level(self.sim.fleet, LEVEL_DOMAIN, survivors) if gang.topology == "required" else None
        got = repair.repair(self.sim.fleet, gang.platform, survivors, wanted, node_ok=keep)
        if self.recovery == "kilter-replan" and (isinstance(got, str) or any(c.step == "new-domain" for c in got)):
            self._evict(j)
            return
        if isinstance(got, str):
            return
        for (pod, home), choice in zip(lost, got, strict=True):
            self._place_pod(j, pod, choice.node, home)
        del self._missing[j]
        p = self.progress[j]
        p.factor = self.sim._slowdown(gang, nodes)[0]
        self._restart(j, p, now)

    def _place_pod(self, j: int, pod: int, node: int, failed: int) -> None:
        gang, nodes, _ = self.sim._booked[j]
        gpus = gang.pod_gpus()[pod]
        self.sim.fleet.bitmap.allocate(node, gpus)
        nodes[pod] = node
        self.sim._used += gpus
        self.stats.repairs += 1
        self.stats.repairs_same_domain += int(self.sim.fleet.node_domain[node] == self.sim.fleet.node_domain[failed])

    def _restart(self, j: int, p: _Progress, now: float) -> None:
        """All its pods have nodes: it computes again after the restart time, and ends when its work is done."""
        p.computing_from = now + self.settings.restart_s
        p.token = next(self._tokens)
        heapq.heappush(self._resumes, (p.computing_from, j, p.token))
        o = self.sim.outcome
        o.end[j] = p.computing_from + p.work_left_s * p.factor
        o.run[j] = o.end[j] - o.start[j]
        heapq.heappush(self.sim._running, (float(o.end[j]), j))

    def _drop_end(self, j: int) -> None:
        """Take the gang's booked end off the running heap: a stale end would keep the run (and its clock of time
        present) going after the last real one. Failures are rare, so a linear search is cheap."""
        entry = (float(self.sim.outcome.end[j]), j)
        if entry in self.sim._running:
            self.sim._running.remove(entry)
            heapq.heapify(self.sim._running)

    def _resume(self, j: int, p: _Progress, now: float) -> None:
        gang = self.sim._booked[j][0]
        self.sim._weight[j] = gang.gpus / p.factor
        self.sim._useful += self.sim._weight[j]
        if p.hit_s is not None:
            self.stats.resume_s.append(now - p.hit_s)
            p.hit_s = None
