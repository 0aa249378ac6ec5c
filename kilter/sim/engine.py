"""The discrete-event simulation: jobs arrive, queue in Kueue's order, start as whole gangs, finish.

Time moves from event to event (an arrival or a finish). After each, one
scheduling pass runs Kueue's cycles: every ClusterQueue nominates its head,
the quota engine orders the nominees (classical order, or the fair-sharing
tournament) and each one is admitted when a flavor has quota *and* the
placement policy finds nodes for every pod on that flavor's platform, as
Kueue's flavor assignment with TAS does. A nominee that cannot start is
left waiting (BestEffortFIFO) and the queue's next job is nominated.

A nominee short of quota may preempt, as its ClusterQueue's ``preemption``
allows: the quota engine picks the targets (fair-sharing or classical
rules); when the gang places on what they free, they are evicted and queued
again from the start (their work is lost, as with Kueue without
checkpoints) and the gang starts.

A job evicted at time t may start again at t where quota and nodes are
free, but preempts no one before the clock moves on. Kueue requeues a
preempted workload with no backoff (its requeuing backoff is for PodsReady
timeouts only), yet only once its pods have terminated, so it never
preempts at the instant it was preempted. This simulation evicts in no
time, and Kueue's fair-sharing rules do let two workloads take each
other's quota in turn (a queue within its nominal quota reclaims with no
share test; the other takes it back when the first queue's share comes
from a resource their workloads do not use): without the rule that would
repeat forever at one instant. Each instant now ends, since every
preemptor starts and, once evicted, waits for the next one.

Until a gang ends, capacity and quota only shrink, so a job that did not fit
means no job of its queue at least as large fits either until then; queues
keep one FIFO per job size, and a pass touches the heads of those FIFOs that
are still below their queue's bound, never the whole backlog.

Kueue's cycles are one admission step (``kueue_cycles``); ``volcano_engine``
has Volcano's (``SimConfig.quota = "volcano"``). What a run adds besides,
node failures and a maintenance rollout, are parts (``parts.Part``) with
events of their own; ``compose.build`` puts a run together from its
configuration, so any of them combine.

Placement has a price (``SimConfig.split_model``): a gang spread over more
scale-up domains than it needs runs ``1 + split_slowdown × extra domains``
times longer (``per-domain``), or ``1 + split_slowdown`` however many extra
domains it uses (``step``), plus ``block_slowdown`` when it crosses a block
boundary it could have avoided; under ``none`` placement never slows a gang.

What each gang asks for is the run's ``topology`` request, or with ``auto``
what the policy's operators would configure for a job of its shape
(``placement.Asking``; ``_gang``).

Under a policy behind kilter's rule (``placement.WaitingPolicy``: kilter, and Kueue
TAS behind kilter's AdmissionCheck) a *preferred* gang may instead wait for
fewer domains (``split_hold``, the servers' ``topology.split_wait`` rule): it
fitted, so it bounds nothing; it is parked, and the jobs behind it go on.
Time then also moves to the moment a parked gang's budget runs out.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from kilter.quota.available import potential_available
from kilter.quota.config import FairSharingConfig
from kilter.quota.usage import WorkloadInfo
from kilter.sim.gangs import Gang, domains_per_block, gang_for, resolved_mode
from kilter.sim.parts import UNBOUNDED, AdmissionStep, Part, PlacementCheck
from kilter.sim.placement import Asking, Nodes, PlacementPolicy, Releasing
from kilter.sim.queues import QueueSetup
from kilter.sim.run_settings import (
    SPLIT_MODELS,
    Outcome,
    QuotaMode,
    SimConfig,
    SplitModel,
    Timeline,
    placed_slowdown,
    slowdown_factor,
)
from kilter.sim.split_hold import make_hold
from kilter.sim.stall import Stalled, stalled_after_s
from kilter.sim.trace import TraceJob
from kilter.topology.fleet import Fleet

__all__ = [
    "SPLIT_MODELS",
    "UNBOUNDED",
    "Outcome",
    "QuotaMode",
    "SimConfig",
    "Simulation",
    "SplitModel",
    "Timeline",
    "slowdown_factor",
]

Progress = Callable[[int, int], None]
P = TypeVar("P", bound=Part)


class Simulation:
    def __init__(
        self,
        fleet: Fleet,
        jobs: Sequence[TraceJob],
        policy: PlacementPolicy,
        queues: QueueSetup,
        config: SimConfig,
        *,
        admission: Callable[[Simulation], AdmissionStep],
        samples: int = 2000,
    ) -> None:
        """``admission`` makes the run's admission step over it (``compose.build`` picks it, and the parts)."""
        if int(fleet.bitmap.node_used_gpus.sum()):
            raise ValueError("the simulation starts from an idle fleet")
        self.fleet = fleet
        self.jobs = jobs
        self.policy = policy
        self._release = policy.release if isinstance(policy, Releasing) else None
        self._restore = policy.restore if isinstance(policy, Releasing) else None
        self.queues = queues
        self.config = config
        self.fair = FairSharingConfig(enabled=config.fair)
        n = len(jobs)
        nan = np.full(n, np.nan)
        self.outcome = Outcome(
            nan.copy(), nan.copy(), nan.copy(), np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.bool_)
        )
        self.timeline = Timeline()
        self.cq_of = [queues.queue_of[j.queue] for j in jobs]
        self._asks = policy.ask if isinstance(policy, Asking) and config.topology == "auto" else None
        self._asked: dict[tuple[int, int], Gang] = {}
        self.hold = make_hold(
            policy, fleet, jobs, self.cq_of, settings=config.split_wait, overrides=queues.split_wait,
            cluster_queues=queues.cluster_queues, split_slowdown=config.split_slowdown,
        )  # fmt: skip
        self._parked: set[int] = self.hold.parked if self.hold is not None else set()  # held: skipped, not failed
        self.cq_names = queues.cluster_queues
        self._cq_index = {name: i for i, name in enumerate(self.cq_names)}
        self._pending: dict[str, dict[int, deque[int]]] = {name: {} for name in self.cq_names}
        self._waiting = 0
        self._running: list[tuple[float, int]] = []
        self._booked: dict[int, tuple[Gang, Nodes, tuple[str, str]]] = {}
        self._admitted: dict[str, dict[int, WorkloadInfo]] = {name: {} for name in self.cq_names}
        self.preemptions = 0
        self._evicted_now: set[int] = set()  # evicted at the current instant: they preempt no one before it ends
        # What failed since capacity last grew: no larger job can start until a gang ends.
        self._place_bound: dict[int, int] = {}
        self._cq_bound: dict[str, int] = dict.fromkeys(self.cq_names, UNBOUNDED)
        self._used = 0
        self._useful = 0.0  # GPUs of running gangs, each weighed by duration over run time (1 when unslowed)
        self._weight: dict[int, float] = {}
        self._queue_used = [0] * len(self.cq_names)
        bm = fleet.bitmap
        self._usable_gpus = int(bm.domain_usable_gpus.sum())
        self._platform_domains = [bm.domain_platforms == i for i in range(len(fleet.platforms))]
        self._blocks = domains_per_block(fleet)
        span = jobs[-1].submit_s if jobs else 0.0
        self._stall_s = stalled_after_s(jobs)
        self._sample_every = max(span, 1.0) / max(samples, 1)
        self._next_sample = 0.0
        self.admission: AdmissionStep = admission(self)
        self.parts: list[Part] = []
        self.reserving: PlacementCheck | None = None  # kilter's reservations with backfill (``compose.build``)

    def add(self, part: Part) -> None:
        """Add a part to the run (before it runs); it is told of the engine's moments after those added before."""
        self.parts.append(part)

    def part(self, kind: type[P]) -> P | None:
        """The run's part of this kind, if it has one."""
        return next((p for p in self.parts if isinstance(p, kind)), None)

    # ------------------------------------------------------------------ the run

    def run(self, progress: Progress | None = None) -> Outcome:
        jobs = self.jobs
        self._find_never()
        next_job = 0
        done = 0
        now = 0.0
        hold = self.hold
        while next_job < len(jobs) or self._running or self._parked or self._holding():
            t_arrive = jobs[next_job].submit_s if next_job < len(jobs) else math.inf
            t_finish = self._running[0][0] if self._running else math.inf
            t = min(t_arrive, t_finish, hold.next_wake() if hold is not None else math.inf, self._next_event_s())
            if t > self._stall_s:
                raise Stalled(
                    f"the simulation stalled: at {now:.0f} s, {len(self._parked)} held gangs and {self._waiting} "
                    f"queued jobs wait, {len(self._running)} run, and the next thing due, at {t:.0f} s, is past any "
                    f"run that makes progress ({self._stall_s:.0f} s)"
                )
            self._account(now, t)
            if t > now:
                self._evicted_now.clear()
            now = t
            if hold is not None and hold.wake(now):  # what failed behind a reservation may not bound its owner
                self._cq_bound.update(dict.fromkeys(self.cq_names, UNBOUNDED))
            while self._running and self._running[0][0] <= now:
                end, j = heapq.heappop(self._running)
                if j not in self._booked or self.outcome.end[j] != end:
                    continue  # evicted before this end; it ends again later, or never
                self._finish(j)
                self._ran_to_end(j)
                if hold is not None:
                    hold.finished(j, float(self.outcome.run[j]))
                done += 1
            self._on_events(now)
            while next_job < len(jobs) and jobs[next_job].submit_s <= now:
                if next_job not in self.outcome.never:
                    self._enqueue(next_job)
                else:
                    done += 1
                next_job += 1
            self._schedule(now)
            if hold is not None:
                hold.observe(now, self._waiting)
            if progress is not None:
                progress(done, len(jobs))
        return self.outcome

    def _next_event_s(self) -> float:
        """When a part's next event is due (a node fails or returns, a gang resumes, a rollout steps)."""
        return min((p.next_event_s() for p in self.parts), default=math.inf)

    def _on_events(self, now: float) -> None:
        """The parts' events due at ``now``, after the gangs ending at ``now`` ended, before arrivals queue."""
        for p in self.parts:
            p.on_events(now)

    def _holding(self) -> bool:
        """A part still has gangs that hold nodes or wait for them outside the queue and the running heap."""
        return any(p.holding() for p in self.parts)

    def _ran_to_end(self, j: int) -> None:
        """Job ``j`` ran to its end (an eviction is no end): the parts learn from it."""
        for p in self.parts:
            p.ran_to_end(j)

    def _schedule(self, now: float) -> None:
        """One scheduling pass: what the parts resume first (a repair), then the admission's."""
        for p in self.parts:
            p.before_schedule(now)
        self.admission.schedule(now)

    # ------------------------------------------------------------------ queues

    def _enqueue(self, j: int) -> None:
        fifo = self._pending[self.cq_of[j]].setdefault(self.jobs[j].gpus, deque())
        if fifo and fifo[-1] > j:  # an evicted job goes back to its place by submit order
            at = next(i for i, other in enumerate(fifo) if other > j)
            fifo.insert(at, j)
        else:
            fifo.append(j)
        self._waiting += 1

    def _head(self, cq: str, below: int) -> int | None:
        best: int | None = None
        parked = self._parked
        for size, fifo in self._pending[cq].items():
            if fifo and size < below:
                first = fifo[0]
                if first in parked and (first := next((k for k in fifo if k not in parked), -1)) < 0:
                    continue
                if best is None or first < best:
                    best = first
        return best

    def _info(self, j: int, *, admitted: tuple[float, tuple[str, str]] | None = None) -> WorkloadInfo:
        """Job ``j`` as the quota engine sees it: pending (asking for its GPUs), or ``admitted`` at (time, flavor)."""
        job = self.jobs[j]
        cq = self.cq_of[j]
        if admitted is not None:
            now, fr = admitted
            return WorkloadInfo(
                "sim", f"job-{j}", f"{j:09d}", cq, job.queue, 0, job.submit_s, True, now, usage={fr: job.gpus}
            )
        pairs = self.queues.flavors[cq]
        resource = self.fleet.platforms[pairs[0][0]].device_resource if pairs else "gpu"
        return WorkloadInfo(
            "sim", f"job-{j}", f"{j:09d}", cq, job.queue, 0, job.submit_s, False, requests={resource: job.gpus}
        )

    def _unqueue(self, cq: str, j: int) -> None:
        """Take job ``j`` off its queue's pending FIFO."""
        fifo = self._pending[cq][self.jobs[j].gpus]
        if fifo[0] == j:
            fifo.popleft()
        else:  # a job it preempted went back in ahead of it
            fifo.remove(j)

    def _place(self, gang: Gang, now: float) -> Nodes | None:
        """The policy's nodes; one that binds as it places (``preview``: kilter over HTTP) is judged by the rule on
        its preview first, so a gang held back is never bound and unbound (the caller's ``_holds`` agrees)."""
        preview = getattr(self.policy, "preview", None)
        if preview is not None and self.hold is not None:
            seen: Nodes | None = preview(self.fleet, gang)
            if seen is not None and self.hold.holds(gang, seen, now):
                return seen
        nodes = self.policy.place(self.fleet, gang)
        if nodes is not None and self.reserving is not None:
            return self.reserving.check(gang, nodes, now)
        return nodes

    def turned_away(self) -> bool:
        """The last ``_place`` found nodes but a reservation kept the gang off them: it does not bound larger
        jobs, which may end sooner and go ahead."""
        return self.reserving is not None and self.reserving.refused_now

    def _holds(self, gang: Gang, nodes: Nodes, now: float) -> bool:
        """The split-wait rule keeps the gang from starting on ``nodes`` now (it is parked, and a policy that
        keeps state forgets the plan)."""
        if self.hold is None or not self.hold.holds(gang, nodes, now):
            return False
        if self._release is not None:
            self._release(gang.job)
        return True

    def _evict_and_place(self, gang: Gang, victims: Sequence[int], *, now: float) -> Nodes | None:
        """Where the gang goes once ``victims`` are evicted and queued again, or None (and nothing evicted): also
        when the split-wait rule holds the gang back from the plan they would leave it, and when the gang's own
        job was evicted at this instant (the module docstring says why)."""
        freed = sum(self._booked[v][0].gpus for v in victims if self._booked[v][0].platform == gang.platform)
        if not victims or gang.job in self._evicted_now or self._free_on(gang.platform) + freed < gang.gpus:
            return None
        bm = self.fleet.bitmap
        for v in victims:
            self._book_nodes(v, bm.release)
            if self._release is not None:
                self._release(v)
        nodes = self._place(gang, now)
        if nodes is not None and self._holds(gang, nodes, now):
            nodes = None
        for v in victims:
            self._book_nodes(v, bm.allocate)
            if nodes is None and self._restore is not None:
                self._restore(v)
        if nodes is None:
            return None
        o = self.outcome
        for v in victims:
            self._finish(v)
            o.start[v] = o.end[v] = o.run[v] = np.nan
            self._enqueue(v)
            self._evicted_now.add(v)
            self.preemptions += 1
        return nodes

    def _gang(self, j: int, platform: int) -> Gang:
        """Job ``j`` as pods of ``platform``, asking what the run says: its one request, or under ``auto`` what the
        policy's operators configure for a job of this shape (asked once per shape, on the fleet as built)."""
        job = self.jobs[j]
        if self._asks is None:
            return gang_for(j, job.gpus, self.fleet.platforms[platform], platform, resolved_mode(self.config.topology))
        key = (job.gpus, platform)
        asked = self._asked.get(key)
        if asked is None:
            bare = gang_for(-1, job.gpus, self.fleet.platforms[platform], platform, "preferred")
            asked = self._asked[key] = self._asks(self.fleet, bare)
        return dataclasses.replace(asked, job=j)

    def _free_on(self, platform: int) -> int:
        """Free usable GPUs of a platform: no gang of more GPUs can start, whatever the policy."""
        bm = self.fleet.bitmap
        return int(bm.domain_free_gpus[self._platform_domains[platform]].sum())

    def _book_nodes(self, j: int, book: Callable[[int, int], None]) -> int:
        """Book (or release) job ``j``'s pods; the GPUs booked (a pod whose node failed, at -1, holds none)."""
        gang, nodes, _ = self._booked[j]
        held = 0
        for node, gpus in zip(nodes.tolist(), gang.pod_gpus(), strict=True):
            if node >= 0:
                book(node, gpus)
                held += gpus
        return held

    # ------------------------------------------------------------------ gangs on nodes

    def _start(self, j: int, gang: Gang, nodes: Nodes, cq: str, fr: tuple[str, str], now: float) -> None:
        self._booked[j] = (gang, nodes, fr)
        self._book_nodes(j, self.fleet.bitmap.allocate)
        self._charge(j, cq, fr=fr, gpus=gang.gpus)
        factor, n_doms, least, crossed = self._slowdown(gang, nodes)
        o = self.outcome
        o.start[j] = now
        o.run[j] = self.jobs[j].duration_s * factor
        o.end[j] = now + o.run[j]
        o.domains[j] = n_doms
        o.min_domains[j] = least
        o.crossed_block[j] = crossed
        self._admitted[cq][j] = self._info(j, admitted=(now, fr))
        self._used += gang.gpus
        self._weight[j] = gang.gpus / factor
        self._useful += self._weight[j]
        self._queue_used[self._cq_index[cq]] += gang.gpus
        heapq.heappush(self._running, (float(o.end[j]), j))
        if self.hold is not None:
            self.hold.started(gang, n_doms, now)
        for p in self.parts:
            p.started(j, gang, nodes, now)

    def _slowdown(self, gang: Gang, nodes: Nodes) -> tuple[float, int, int, bool]:
        """``run_settings.placed_slowdown`` of the gang on ``nodes`` in this run."""
        return placed_slowdown(self.config, self.fleet, self._blocks, gang, nodes)

    def _capacity_grew(self) -> None:
        """What did not fit may fit now: the bounds on placements and queues are reset."""
        self._place_bound.clear()
        self._cq_bound.update(dict.fromkeys(self.cq_names, UNBOUNDED))
        if self.hold is not None:
            self.hold.capacity_grew()
        self.admission.capacity_grew()
        for p in self.parts:
            p.capacity_grew()

    def _finish(self, j: int) -> None:
        freed = self._book_nodes(j, self.fleet.bitmap.release)
        gang, _, fr = self._booked.pop(j)
        cq = self.cq_of[j]
        del self._admitted[cq][j]
        self._uncharge(j, cq, fr=fr, gpus=gang.gpus)
        self._capacity_grew()
        if self._release is not None:
            self._release(j)
        self._used -= freed
        self._useful -= self._weight.pop(j)
        self._queue_used[self._cq_index[cq]] -= gang.gpus
        for p in self.parts:
            p.finished(j)

    def _charge(self, j: int, cq: str, *, fr: tuple[str, str], gpus: int) -> None:
        self.admission.charge(j, cq, fr=fr, gpus=gpus)  # it started, or holds its quota while the split wait holds it

    def _uncharge(self, j: int, cq: str, *, fr: tuple[str, str], gpus: int) -> None:
        self.admission.uncharge(j, cq, fr=fr, gpus=gpus)  # it ended or was evicted

    def _find_never(self) -> None:
        """Jobs that could not start even on the idle fleet with their queue's whole reach: reported, not queued."""
        seen: dict[tuple[str, int], str] = {}
        for j, job in enumerate(self.jobs):
            key = (self.cq_of[j], job.gpus)
            if key not in seen:
                seen[key] = self._why_never(j)
            if seen[key]:
                self.outcome.never[j] = seen[key]

    def _why_never(self, j: int) -> str:
        job = self.jobs[j]
        cq = self.queues.tree.cluster_queues[self.cq_of[j]]
        reasons = []
        for platform, flavor in self.queues.flavors[cq.name]:
            p = self.fleet.platforms[platform]
            most = potential_available(cq, (flavor, p.device_resource))
            if most < job.gpus:
                reasons.append(f"{flavor}: ClusterQueue {cq.name} can never hold {job.gpus} GPUs ({most})")
                continue
            placed = self.policy.place(self.fleet, self._gang(j, platform))
            if placed is None:
                reasons.append(f"{p.name}: {job.gpus} GPUs do not fit the idle fleet as {self.policy.name} places")
                continue
            if self._release is not None:
                self._release(j)
            return ""
        return "; ".join(reasons) or f"ClusterQueue {cq.name} has no flavor on this fleet"

    # ------------------------------------------------------------------ accounting

    def _account(self, t0: float, t1: float) -> None:
        """Time passed from ``t0`` to ``t1``: the engine's sums (while any job is present), then the parts'."""
        self._account_present(t0, t1)
        for p in self.parts:
            p.account(t0, t1)

    def _account_present(self, t0: float, t1: float) -> None:
        dt = t1 - t0
        if dt <= 0 or not (self._waiting or self._running or self._holding()):
            return
        tl = self.timeline
        tl.present_s += dt
        tl.busy_gpu_s += self._used * dt
        tl.useful_gpu_s += self._useful * dt
        tl.available_gpu_s += self._usable_gpus * dt
        bm = self.fleet.bitmap
        free = bm.domain_free_gpus
        total_free = int(free.sum())
        if total_free:
            usable = bm.domain_usable_gpus
            stranded = int(free[(free > 0) & (free < usable)].sum())
            tl.stranded_share_s += stranded / total_free * dt
        if t0 >= self._next_sample:
            tl.times.append(t0)
            tl.used.append(self._used)
            tl.waiting.append(self._waiting)
            tl.queue_used.append(list(self._queue_used))
            self._next_sample = t0 + self._sample_every
