"""One trace over several regions, dispatched four ways: what a global pool buys over regional silos.

Each region is a whole simulation of its own (``RegionalSimulation``: its
fleet, its queues under Kueue's admission or, with ``--quota volcano``,
Volcano's (``compose.admission_for``), its placement policy, kilter's by
default), and the
regions share one clock. A job belongs to a *home* region
(``region_split``). What differs is where copies of a waiting job are queued;
the first region to admit a copy wins and every other copy is withdrawn:

- ``silo``: only at home, as separate clusters run today.
- ``kilter``: at home from its submission; while it waits there, also in the
  regions ``topology.regions.nominate`` picks from each region's published
  room (``rooms_of``: per scale-up domain the free GPUs and the largest gang
  shape, the ``DomainRoom`` the live inventory carries) and quota headroom.
  It is ranked again whenever room may have changed: a gang ended
  somewhere, or a region it was sent to took other work; copies follow.
- ``all-at-once``: MultiKueue's default dispatcher, a copy in every region
  at once (Kueue ``workloaddispatcher.AllAtOnceDispatcherReconciler``, every
  active cluster, in name order; a copy where the job could never fit, even
  on the idle fleet, is left out here, as it could never win).
- ``incremental``: MultiKueue's incremental dispatcher (Kueue
  ``workloaddispatcher.IncrementalDispatcherReconciler``): copies in the
  first ``INCREMENTAL_BATCH`` (3) regions in name order, 3 more each
  ``INCREMENTAL_ROUND_S`` (5 minutes, ``incrementalDispatcherRoundTimeout``)
  it is still not admitted, the earlier ones kept, until none are left.

A job that starts away from home pays ``delay_s``: its GPUs are booked at the
admission and it computes ``delay_s`` later (the copy's creation, image pull
and data staging). Its wait counts the delay, its run time does not, and the
GPUs held meanwhile count as busy but not useful. No region ever reads a
job's duration from another; dispatch decisions read only the summaries.

At each instant gangs end first, then arrivals are queued (and timers
fire), then every region runs its admission, in an order drawn at random
from the seed for each instant: the race between regions that could admit
the same job at once has no fixed winner. For ``kilter``, dispatch rounds
and cycles then alternate until a round starts nothing. Preemption (and
Volcano's reclaim, which follows it), node failures and maintenance are
regional matters this model leaves out (``simulate_regions`` refuses them).
A copy withdrawn from Volcano's queues takes its queue's charge with it.

The regional engine is ``regional``'s; the spec and the split of the trace
into homes are ``region_split``'s.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from kilter.model.errors import InputError
from kilter.quota.available import available
from kilter.sim.engine import SimConfig
from kilter.sim.gangs import Gang, gang_for, resolved_mode
from kilter.sim.policies import make_policy
from kilter.sim.queues import queue_setup
from kilter.sim.regional import RegionalSimulation
from kilter.sim.trace import TraceJob
from kilter.topology import regions as topology_regions
from kilter.topology import rooms
from kilter.topology.fleet import Fleet

__all__ = [
    "DISPATCHERS",
    "INCREMENTAL_BATCH",
    "INCREMENTAL_ROUND_S",
    "Dispatcher",
    "Region",
    "RegionRun",
    "RegionalSimulation",
    "ask_for",
    "kilter_targets",
    "rooms_of",
    "simulate_regions",
]

Dispatcher = Literal["silo", "kilter", "all-at-once", "incremental"]
DISPATCHERS: tuple[Dispatcher, ...] = ("silo", "kilter", "all-at-once", "incremental")
INCREMENTAL_BATCH = 3  # getNextNominatedWorkers: batchSize := 3
INCREMENTAL_ROUND_S = 300.0  # incrementalDispatcherRoundTimeout = 5 * time.Minute


def rooms_of(fleet: Fleet) -> tuple[topology_regions.DomainRoom, ...]:
    """Each domain's room now, as ``gangs.inventory`` publishes it (``topology.rooms.domain_rooms``)."""
    return rooms.domain_rooms(fleet)


def ask_for(gang: Gang, fleet: Fleet, *, home: str, queue: str) -> topology_regions.GangAsk:
    """The gang as a peer's dispatcher sees it (``GangAsk.of_pod_sets``, as the live dispatcher makes it): its
    largest pods as the shape, the GPUs of the smaller ones besides."""
    return topology_regions.GangAsk.of_pod_sets(
        gang.pod_sets, platforms=(fleet.platforms[gang.platform].name,), home=home, queue=queue
    )


def _views(
    sims: Sequence[RegionalSimulation],
    rooms: Sequence[tuple[topology_regions.DomainRoom, ...]],
    tenant: str,
    platform: str,
) -> list[topology_regions.RegionView]:
    """Each region as a peer sees it: its rooms, and the tenant's quota headroom on ``platform`` (none where its
    ClusterQueue there has no flavor of it)."""
    out = []
    for sim, room in zip(sims, rooms, strict=True):
        cq_name = sim.queues.queue_of.get(tenant)
        headroom = {}
        if cq_name is not None:
            cq = sim.queues.tree.cluster_queues[cq_name]
            free = [
                available(cq, (flavor, sim.fleet.platforms[p].device_resource))
                for p, flavor in sim.queues.flavors[cq_name]
                if sim.fleet.platforms[p].name == platform
            ]
            if free:
                headroom[tenant] = max(free)
        out.append(topology_regions.RegionView(sim.name, room, headroom))
    return out


def kilter_targets(
    sims: Sequence[RegionalSimulation],
    rooms: Sequence[tuple[topology_regions.DomainRoom, ...]],
    *,
    home: int,
    tenant: str,
    gpus: int,
) -> list[int]:
    """The regions (indices) ``topology.regions.nominate`` sends a job of ``tenant`` and ``gpus`` GPUs from ``home``
    to, given each region's ``rooms``; platforms are tried in the order the home region's ClusterQueue lists them,
    then the other regions', and the first that fits anywhere is taken. [] when it fits nowhere now."""
    names = [s.name for s in sims]
    for k in [home, *(i for i in range(len(sims)) if i != home)]:
        sim = sims[k]
        cq_name = sim.queues.queue_of.get(tenant)
        for p, _ in sim.queues.flavors[cq_name] if cq_name is not None else []:
            platform = sim.fleet.platforms[p]
            gang = gang_for(-1, gpus, platform, p, resolved_mode(sim.config.topology))
            ask = ask_for(gang, sim.fleet, home=names[home], queue=tenant)
            chosen = topology_regions.nominate(ask, _views(sims, rooms, tenant, platform.name))
            if chosen:
                return [names.index(name) for name in chosen]
    return []


@dataclass(frozen=True)
class Region:
    """A region of the pool: its name (what MultiKueue sorts on) and a maker of its idle fleet."""

    name: str
    make_fleet: Callable[[], Fleet]


@dataclass
class RegionRun:
    """One dispatcher's run: per job the region it started in (-1: never), the regions, and the metrics."""

    dispatcher: Dispatcher
    where: list[int]
    sims: list[RegionalSimulation]
    copies_per_job: float
    present_s: float
    metrics: dict[str, Any] = field(default_factory=dict)


class _Pool:
    """The shared clock, the copies of each waiting job, and the dispatcher's own state."""

    def __init__(
        self, sims: list[RegionalSimulation], homes: Sequence[int], dispatcher: Dispatcher, *, seed: int
    ) -> None:
        self.sims = sims
        self.names = [s.name for s in sims]
        self.homes = homes
        self.dispatcher = dispatcher
        self.jobs = sims[0].jobs
        self.rng = np.random.default_rng(seed)
        self.copies: dict[int, set[int]] = {}
        self.offered = [0] * len(self.jobs)  # per job, a bit for each region ever sent a copy
        self.where = [-1] * len(self.jobs)
        self.present_s = 0.0
        self.by_name = sorted(range(len(sims)), key=lambda i: self.names[i])
        self.timers: list[tuple[float, int]] = []  # incremental: (next round, job)
        self.rounds: dict[int, int] = {}  # incremental: regions nominated so far
        self.groups: dict[tuple[int, str, int], dict[int, None]] = {}  # kilter: waiting jobs by what ranks them
        self.sent: dict[tuple[int, str, int], list[int]] = {}  # kilter: where each group is sent now
        self.fresh: set[int] = set()
        self.rooms: list[tuple[int, tuple[topology_regions.DomainRoom, ...]]] = [(-1, ()) for _ in sims]

    # ------------------------------------------------------------------ copies

    def offer(self, j: int, k: int) -> None:
        if self.sims[k].offer(j):
            self.copies.setdefault(j, set()).add(k)
            self.offered[j] |= 1 << k

    def withdraw(self, j: int, k: int) -> None:
        self.sims[k].withdraw(j)
        self.copies.get(j, set()).discard(k)

    def started(self, j: int, k: int) -> None:
        self.where[j] = k
        for other in self.copies.pop(j, set()) - {k}:
            self.sims[other].withdraw(j)
        if self.dispatcher == "kilter":
            self.groups[self.key(j)].pop(j, None)
            self.fresh.discard(j)

    def schedule_all(self, now: float) -> set[int]:
        """Every region's cycles, in this instant's random order; the regions where something started."""
        touched = set()
        for k in self.rng.permutation(len(self.sims)).tolist():
            for j in self.sims[k].schedule(now):
                self.started(j, k)
                touched.add(k)
        return touched

    # ------------------------------------------------------------------ dispatchers

    def arrive(self, j: int, now: float) -> None:
        home = self.homes[j]
        if self.dispatcher == "silo":
            self.offer(j, home)
        elif self.dispatcher == "all-at-once":
            for k in self.by_name:
                self.offer(j, k)
        elif self.dispatcher == "incremental":
            self.nominate_more(j, now)
        else:
            self.offer(j, home)
            self.groups.setdefault(self.key(j), {})[j] = None
            self.fresh.add(j)

    def nominate_more(self, j: int, now: float) -> None:
        """The incremental dispatcher's next round: the next 3 regions by name, the earlier ones kept."""
        done = self.rounds.get(j, 0)
        for k in self.by_name[done : done + INCREMENTAL_BATCH]:
            self.offer(j, k)
        self.rounds[j] = done = done + INCREMENTAL_BATCH
        if done < len(self.by_name):
            heapq.heappush(self.timers, (now + INCREMENTAL_ROUND_S, j))

    def fire_timers(self, now: float) -> None:
        while self.timers and self.timers[0][0] <= now:
            _, j = heapq.heappop(self.timers)
            if self.where[j] < 0:
                self.nominate_more(j, now)

    def key(self, j: int) -> tuple[int, str, int]:
        """What the kilter dispatcher ranks a job by: home, tenant, GPUs (equal keys get equal nominations)."""
        job = self.jobs[j]
        return self.homes[j], job.queue, job.gpus

    def room(self, k: int) -> tuple[topology_regions.DomainRoom, ...]:
        version, rooms = self.rooms[k]
        if version != self.sims[k].version:
            rooms = rooms_of(self.sims[k].fleet)
            self.rooms[k] = (self.sims[k].version, rooms)
        return rooms

    def targets(self, key: tuple[int, str, int]) -> list[int]:
        home, tenant, gpus = key
        rooms = [self.room(k) for k in range(len(self.sims))]
        return kilter_targets(self.sims, rooms, home=home, tenant=tenant, gpus=gpus)

    def dispatch_round(self, keys: set[tuple[int, str, int]]) -> None:
        """Rank the waiting jobs of ``keys`` again (and every job that arrived since the last round); copies follow."""
        keys = keys | {self.key(j) for j in self.fresh}
        for key in sorted(keys):
            members = self.groups.get(key)
            if not members:
                continue
            chosen = self.targets(key)
            changed = chosen != self.sent.get(key)
            self.sent[key] = chosen
            for j in list(members) if changed else [j for j in members if j in self.fresh]:
                keep = {*chosen, self.homes[j]}
                for k in sorted(self.copies.get(j, set()) - keep):
                    self.withdraw(j, k)
                for k in chosen:
                    self.offer(j, k)
        self.fresh.clear()

    def waiting_keys(self, regions: set[int] | None = None) -> set[tuple[int, str, int]]:
        """Keys with waiting jobs: all, or those sent to one of ``regions`` (whose room just shrank)."""
        return {
            key
            for key, members in self.groups.items()
            if members and (regions is None or regions & set(self.sent.get(key, ())))
        }

    # ------------------------------------------------------------------ the run

    def run(self) -> None:
        jobs = self.jobs
        next_job, now = 0, 0.0
        while True:
            t = min(
                jobs[next_job].submit_s if next_job < len(jobs) else math.inf,
                min(s.next_event_s() for s in self.sims),
                self.timers[0][0] if self.timers else math.inf,
            )
            if t == math.inf:
                return
            if any(s.is_busy() for s in self.sims):
                self.present_s += t - now
            now = t
            ended = [s.advance(now) for s in self.sims]
            while next_job < len(jobs) and jobs[next_job].submit_s <= now:
                self.arrive(next_job, now)
                next_job += 1
            self.fire_timers(now)
            touched = self.schedule_all(now)
            if self.dispatcher != "kilter":
                continue
            keys = self.waiting_keys() if any(ended) else self.waiting_keys(touched)
            while True:
                self.dispatch_round(keys)
                touched = self.schedule_all(now)
                if not touched:
                    break
                keys = self.waiting_keys(touched)


def simulate_regions(
    regions: Sequence[Region],
    jobs: Sequence[TraceJob],
    homes: Sequence[int],
    dispatcher: Dispatcher,
    *,
    policy: str = "kilter",
    queue_objects: Sequence[Any] = (),
    config: SimConfig | None = None,
    delay_s: float = 30.0,
    seed: int = 0,
) -> RegionRun:
    """Replay ``jobs`` (each with its home, an index into ``regions``) under one dispatcher; fresh fleets and
    queues for every call, so runs never share state."""
    if dispatcher not in DISPATCHERS:
        raise InputError(f"unknown dispatcher {dispatcher!r} (known: {', '.join(DISPATCHERS)})")
    if not regions or len(homes) != len(jobs) or any(not 0 <= h < len(regions) for h in homes):
        raise InputError("every job needs a home among the regions")
    if not math.isfinite(delay_s) or delay_s < 0:
        raise InputError(f"the dispatch delay must be 0 s or more, got {delay_s!r}")
    config = config or SimConfig()
    if config.failures is not None or config.maintenance is not None:
        raise InputError("--regions runs without node failures or maintenance (no --node-mtbf, --maintenance)")
    names = [r.name for r in regions]
    home_names = [names[h] for h in homes]
    tenants = Counter(j.queue for j in jobs)
    sims = []
    for region in regions:
        fleet = region.make_fleet()
        queues = queue_setup(queue_objects, fleet, tenants)
        preempting = sorted(n for n, cq in queues.tree.cluster_queues.items() if cq.preemption is not None)
        if preempting:
            raise InputError(f"--regions does not model preemption; ClusterQueue {preempting[0]} sets it")
        placement = make_policy(policy, seed=seed)
        sim = RegionalSimulation(region.name, fleet, jobs, placement, queues, config, home=home_names, delay_s=delay_s)
        sims.append(sim)
    pool = _Pool(sims, homes, dispatcher, seed=seed)
    pool.run()
    ran = [j for j, k in enumerate(pool.where) if k >= 0]
    copies = sum(pool.offered[j].bit_count() for j in ran) / len(ran) if ran else 0.0
    out = RegionRun(dispatcher, pool.where, sims, copies, pool.present_s)
    out.metrics = region_metrics(out, homes)
    return out


def region_metrics(run: RegionRun, homes: Sequence[int]) -> dict[str, Any]:
    """What ``kilter simulate --regions`` reports per dispatcher (the doc's table; waits include the delay)."""
    sims = run.sims
    jobs = sims[0].jobs
    where = np.asarray(run.where, dtype=np.int64)
    ran = where >= 0
    start = np.full(len(jobs), np.nan)
    end = np.full(len(jobs), np.nan)
    least_domains = np.zeros(len(jobs), dtype=np.bool_)
    for k, sim in enumerate(sims):
        mine = where == k
        start[mine], end[mine] = sim.outcome.start[mine], sim.outcome.end[mine]
        least_domains[mine] = sim.outcome.domains[mine] <= sim.outcome.min_domains[mine]
    submit = np.fromiter((j.submit_s for j in jobs), dtype=np.float64, count=len(jobs))
    wait = (start - submit)[ran]
    away = ran & (where != np.asarray(homes, dtype=np.int64))
    present = run.present_s
    usable = sum(s.usable_gpus for s in sims)
    busy = sum(s.timeline.busy_gpu_s for s in sims)
    useful = sum(s.timeline.useful_gpu_s for s in sims)
    return {
        "jobs": len(jobs),
        "completed": int(ran.sum()),
        "neverRan": int((~ran).sum()),
        "meanWaitSeconds": round(float(wait.mean()), 1) if len(wait) else 0.0,
        "p95WaitSeconds": round(float(np.percentile(wait, 95)), 1) if len(wait) else 0.0,
        "meanJctSeconds": round(float((end - submit)[ran].mean()), 1) if ran.any() else 0.0,
        "utilization": round(busy / (usable * present), 4) if present else 0.0,
        "usefulUtilization": round(useful / (usable * present), 4) if present else 0.0,
        "regionUtilization": {
            s.name: round(s.timeline.busy_gpu_s / (s.usable_gpus * present), 4) if present else 0.0 for s in sims
        },
        "regionJobs": {s.name: int((where == k).sum()) for k, s in enumerate(sims)},
        "leastDomainsFraction": round(float(least_domains[ran].mean()), 4) if ran.any() else 1.0,
        "awayFromHome": int(away.sum()),
        "awayFromHomeFraction": round(float(away.sum() / ran.sum()), 4) if ran.any() else 0.0,
        "copiesPerJob": round(run.copies_per_job, 3),
        "splitWaited": sum(len(s.hold.waits) for s in sims if s.hold is not None),
    }
