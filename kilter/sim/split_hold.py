"""The split-wait rule as the simulator runs it for the ``kilter`` policy: hold a split plan back, wake up later.

When the planner's answer for a *preferred* gang spans more scale-up domains
than the fewest the gang could use on the fleet as it is, every usable GPU
idle (``split_wait.fewest_domains_idle``: failed trays count; the slowdown of
a split counts from the platform's own minimum, ``Platform.unsplit_domains``)
and some job runs on its platform to make room (``split_wait.room_may_come``),
``split_wait.decide`` — the function every server path asks — says whether
the gang should wait for a better plan instead. A held gang does not start
and holds nothing (under ``--quota volcano`` it stays enqueued, charged as
Volcano charges any enqueued job); it is *parked*: the engine skips it, and
the jobs behind it in its queue go on (BestEffortFIFO). Until capacity grows
(a gang ends or is evicted) its plan cannot get better, so it stays parked
without asking the planner again; every finish unparks every held gang, and
so does its own timer when its budget runs out.

What a split is priced by (``price``): ``queue`` (default) — its own
slowdown and what it takes from the jobs queued behind it
(``split_wait.QueueLoad``, over the engine's ``backlog.Backlog`` of waiting
jobs, each held gang's own wait left out): while jobs have waited all along
a span as long as its expected run, no wait is too dear, and the gang waits
for its fewest domains as a required gang would, holding no quota (the
AdmissionCheck's ``Retry``: the room it waits for is the queue's meanwhile);
or ``own`` — its own slowdown alone, the rule before issue #39.

Two more choices decide what a wait priced by the gang's own slowdown costs
the others and how long it can last (``WaitSettings``;
``docs/sim/split-wait-study.md`` measures all four):

- ``holds``: ``quota`` (default) — the held gang keeps its ClusterQueue
  quota reserved, as a Kueue Workload does while it waits for its
  AdmissionCheck (``Pending``) or while its admitted pods wait in
  kube-scheduler, so the jobs behind it cannot take the room it waits for;
  or ``nothing`` — it gives its quota back (an AdmissionCheck ``Retry``).
  A reservation is no preemption target, and a gang held after a what-if
  preemption reserves nothing (it had no quota to reserve).
- ``clock``: ``reserved`` (default) — the budget counts from the first time
  the gang fitted and was held (the moment Kueue reserves its quota, the
  Workload's ``QuotaReserved`` transition); or ``submit`` — from its
  creation, so a gang that queued longer than its budget for any room at
  all never waits for better room.

The budget needs each job's expected runtime (``RUNTIME_ESTIMATES``):

- ``learned``: ``quota.runtimes.RuntimeLearner`` per ClusterQueue and gang
  size class, fed at every finish with the run time the cluster saw (slowed
  by its placement); evicted runs teach it nothing.
- ``declared``: what users would declare: the true duration × e^N(0,1),
  drawn from (seed, job), because users' own estimates are that noisy.
- ``oracle``: the true duration (for comparison; no cluster knows it).
- ``none``: no estimate, so no gang ever waits.

The rule's split slowdown is what an operator tells ``kilter serve``
(``--split-slowdown``, default ``split_wait.DEFAULT_SPLIT_SLOWDOWN``), not
what the simulation charges: a cluster does not know how much slower a split
gang really runs. ``WaitSettings.split_slowdown`` None hands the rule the
simulation's own price per extra domain (``--split-wait-slowdown true``, for
comparison). Its factor and cap come from the ClusterQueue's
``kilter.dev/split-wait{,-max}`` annotations, else its nearest Cohort's,
else ``WaitSettings`` (the ``--split-wait``/``--split-wait-max`` flags).

Which policies the rule stands in front of, each policy says
(``placement.WaitingPolicy``): kilter, and Kueue TAS behind kilter's AdmissionCheck.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from kilter.model.errors import InputError
from kilter.quota.runtimes import RuntimeLearner
from kilter.sim.gangs import Gang
from kilter.sim.placement import Nodes, waits_for_fewer_domains
from kilter.sim.trace import TraceJob
from kilter.topology import split_wait
from kilter.topology.backlog import Backlog
from kilter.topology.fleet import Fleet

__all__ = [
    "RUNTIME_ESTIMATES",
    "WAIT_CLOCKS",
    "WAIT_HOLDS",
    "WAIT_PRICES",
    "RuntimeEstimate",
    "RuntimeEstimates",
    "SplitHold",
    "WaitClock",
    "WaitHolds",
    "WaitPrice",
    "WaitSettings",
    "make_hold",
]

RuntimeEstimate = Literal["learned", "declared", "oracle", "none"]
RUNTIME_ESTIMATES: tuple[RuntimeEstimate, ...] = ("learned", "declared", "oracle", "none")
WaitHolds = Literal["quota", "nothing"]
WAIT_HOLDS: tuple[WaitHolds, ...] = ("quota", "nothing")
WaitClock = Literal["reserved", "submit"]
WAIT_CLOCKS: tuple[WaitClock, ...] = ("reserved", "submit")
WaitPrice = Literal["queue", "own"]
WAIT_PRICES: tuple[WaitPrice, ...] = ("queue", "own")


@dataclass(frozen=True)
class WaitSettings:
    """The flags: the rule's factor (0 turns it off) and cap, where expected runtimes come from, the noise's seed,
    and the split slowdown the operator told kilter (None: the simulation's true one, module docstring)."""

    factor: float = split_wait.DEFAULT_FACTOR
    max_s: float = split_wait.DEFAULT_MAX_S
    runtime_estimate: RuntimeEstimate = "learned"
    seed: int = 0
    holds: WaitHolds = "quota"
    clock: WaitClock = "reserved"
    split_slowdown: float | None = split_wait.DEFAULT_SPLIT_SLOWDOWN
    price: WaitPrice = "queue"
    reserve: bool = False  # the oldest waiting gang of each queue gets a reservation, the rest backfill (reserving)

    def __post_init__(self) -> None:
        if self.runtime_estimate not in RUNTIME_ESTIMATES:
            raise InputError(f"unknown runtime estimate {self.runtime_estimate!r} ({', '.join(RUNTIME_ESTIMATES)})")
        if self.holds not in WAIT_HOLDS or self.clock not in WAIT_CLOCKS:
            raise InputError(f"a held gang holds one of {WAIT_HOLDS}, its clock is one of {WAIT_CLOCKS}")
        if self.price not in WAIT_PRICES:
            raise InputError(f"a split is priced by one of {WAIT_PRICES}, not {self.price!r}")
        split_wait.SplitWait(self.factor, self.max_s, self.split_slowdown or 0.0)  # the checks annotations get


class RuntimeEstimates:
    """Each trace job's expected runtime in seconds as ``mode`` gives it, or None where it gives none."""

    def __init__(self, mode: RuntimeEstimate, jobs: Sequence[TraceJob], cq_of: Sequence[str], *, seed: int) -> None:
        self.mode = mode
        self._jobs = jobs
        self._cq_of = cq_of
        self._seed = seed
        self.learner = RuntimeLearner()
        self._declared: dict[int, float] = {}
        self._learned: dict[tuple[str, int], float | None] = {}  # until the next finish teaches the learner

    def of(self, j: int) -> float | None:
        job = self._jobs[j]
        if self.mode == "learned":
            key = (self._cq_of[j], job.gpus)
            if key not in self._learned:
                self._learned[key] = self.learner.estimate(*key)
            return self._learned[key]
        if self.mode == "oracle":
            return job.duration_s
        if self.mode == "declared":
            declared = self._declared.get(j)
            if declared is None:
                noise = float(np.random.default_rng((self._seed, j)).standard_normal())
                declared = self._declared[j] = job.duration_s * math.exp(noise)
            return declared
        return None

    def finished(self, j: int, run_s: float) -> None:
        """Job ``j`` ran to its end in ``run_s`` seconds (as the cluster saw it, slowdown included)."""
        if self.mode == "learned":
            self.learner.observe(self._cq_of[j], self._jobs[j].gpus, run_s)
            self._learned.clear()


class SplitHold:
    """Which pending gangs hold a split plan back and until when; what the waiting came to.

    ``parked`` is shared with the engine, which skips its jobs; ``reserved``
    is the engine's record of the quota (flavor, resource) each held gang
    keeps while ``keeps_quota``. ``waits``
    lists, per gang that was held and then started, the seconds from its
    first hold to its start; ``took_split`` counts those that still started
    on more domains than their fewest (their budget ran out first).
    """

    def __init__(
        self,
        fleet: Fleet,
        jobs: Sequence[TraceJob],
        cq_of: Sequence[str],
        *,
        rules: dict[str, split_wait.SplitWait],
        estimates: RuntimeEstimates,
        keeps_quota: bool = True,
        clock: WaitClock = "reserved",
        price: WaitPrice = "queue",
    ) -> None:
        self._fleet = fleet
        self._jobs = jobs
        self._cq_of = cq_of
        self._rules = rules
        self.estimates = estimates
        self.keeps_quota = keeps_quota
        self._clock = clock
        self.parked: set[int] = set()
        self.reserved: dict[int, tuple[str, str]] = {}
        self._deadline: dict[int, float] = {}
        self._timers: list[tuple[float, int]] = []
        self._first_held: dict[int, float] = {}
        self.waits: list[float] = []
        self.took_split = 0
        self._for_the_queue: dict[int, Gang] = {}  # held while the queue is saturated
        self._now = 0.0  # the run's clock, as ``wake`` last saw it
        self.backlog = Backlog(rules_horizon(rules)) if price == "queue" else None
        self._usable = int(fleet.bitmap.domain_usable_gpus.sum())

    def fewest_domains(self, gang: Gang) -> int:
        """The fewest domains the gang could use on the idle fleet (failed trays counted), at least 1."""
        return max(1, split_wait.fewest_domains_idle(self._fleet, gang.platform, gang.pod_sets))

    def holds(self, gang: Gang, nodes: Nodes, now: float) -> bool:
        """Should the gang wait rather than start on ``nodes`` now? If so it is parked until capacity grows or
        its budget runs out."""
        j = gang.job
        rule = self._rules[self._cq_of[j]]
        if gang.topology != "preferred" or not rule.enabled:
            return False
        least = self.fewest_domains(gang)
        used = len(np.unique(self._fleet.node_domain[nodes]))
        if used <= least or not split_wait.room_may_come(self._fleet, gang.platform):
            return False
        since = self._first_held.get(j, now) if self._clock == "reserved" else self._jobs[j].submit_s
        decision = split_wait.decide(
            rule,
            domains_now=used,
            domains_min=least,
            expected_runtime_s=self.estimates.of(j),
            waited_s=now - since,
            load=self.load(now, self.estimates.of(j), self._jobs[j].submit_s),
            gpus=gang.gpus,
        )
        deadline = now + decision.remaining_s
        if not decision.wait or deadline <= now:  # a budget left below the clock's resolution is spent
            return False
        if math.isinf(decision.remaining_s):
            self._for_the_queue[j] = gang
        else:
            self._for_the_queue.pop(j, None)
        self.parked.add(j)
        self._first_held.setdefault(j, now)
        if self._deadline.get(j) != deadline:
            self._deadline[j] = deadline
            heapq.heappush(self._timers, (deadline, j))
        return True

    def keeps_quota_of(self, j: int) -> bool:
        """Whether held gang ``j`` keeps its quota reserved: as ``keeps_quota`` says while it waits out its own
        budget (the AdmissionCheck's ``Pending``), never while it waits for the queue's sake (``Retry``: holding
        the quota would keep from the queue the very room the wait is meant to leave it)."""
        return self.keeps_quota and j not in self._for_the_queue

    def observe(self, now: float, waiting: int) -> None:
        """After a pass, ``waiting`` jobs wait (the backlog a split is priced by)."""
        if self.backlog is not None:
            self.backlog.observe(now, waiting)

    def load(self, now: float, expected_runtime_s: float | None, waiting_since: float) -> split_wait.QueueLoad | None:
        """The queue as the gang sees it: the backlog over its expected run, less its own waiting since
        ``waiting_since``."""
        if self.backlog is None or expected_runtime_s is None:
            return None
        others = self.backlog.mean_of_others(now, expected_runtime_s, waiting_since)
        return split_wait.QueueLoad(others, self._usable)

    def next_wake(self) -> float:
        """When the next held gang's budget runs out (inf when none is held)."""
        timers = self._timers
        while timers and self._deadline.get(timers[0][1]) != timers[0][0]:
            heapq.heappop(timers)  # the gang started, or was held again with another budget
        return timers[0][0] if timers else math.inf

    def wake(self, now: float) -> bool:
        """Unpark the gangs whose budget has run out by ``now``: the next pass takes the best plan they have.
        Were there any?"""
        self._now = now
        timers = self._timers
        woke = False
        while timers and timers[0][0] <= now:
            deadline, j = heapq.heappop(timers)
            if self._deadline.get(j) == deadline:
                del self._deadline[j]
                self.parked.discard(j)
                woke = True
        return woke

    def capacity_grew(self) -> None:
        """A gang ended or was evicted: every held gang may have a better plan now, but one held for the queue's
        sake while the queue is still saturated, jobs run that may make room and no fewest domains have its GPUs free
        between them (a bound: no plan in its fewest domains can exist), which would only be held again: it stays
        parked, unplanned. The fleet is read once per platform and gang shape for all of them (``_Room``)."""
        held = [(j, gang) for j, gang in self._for_the_queue.items() if j in self.parked]
        room = _Room(self)
        keep = [j for j, gang in held if self._hopeless(gang, room)]
        self.parked.clear()
        self.parked.update(keep)

    def _hopeless(self, gang: Gang, room: _Room) -> bool:
        if room.may_fit_fewest(gang) is not False:
            return False  # planned again, it starts whole, or (nothing runs that could make room) split
        load = self.load(self._now, self.estimates.of(gang.job), self._jobs[gang.job].submit_s)
        return load is not None and load.saturated

    def started(self, gang: Gang, domains: int, now: float) -> None:
        j = gang.job
        self.parked.discard(j)
        self._for_the_queue.pop(j, None)
        self._deadline.pop(j, None)
        first = self._first_held.pop(j, None)
        if first is not None:
            self.waits.append(now - first)
            self.took_split += domains > self.fewest_domains(gang)

    def finished(self, j: int, run_s: float) -> None:
        """Job ``j`` ran to its end (an eviction is not an end: it teaches nothing)."""
        self.estimates.finished(j, run_s)


class _Room:
    """The fleet as one ``capacity_grew`` reads it for every held gang: per platform, whether a job runs there to
    make room (``split_wait.room_may_come``) and its domains' free GPUs, most first, summed; per gang shape, its
    fewest domains now (failures and repairs since a gang was held move them)."""

    def __init__(self, hold: SplitHold) -> None:
        self._hold = hold
        self._free_most_first: dict[int, np.ndarray | None] = {}
        self._fits: dict[tuple[int, tuple[tuple[int, int], ...]], bool | None] = {}

    def may_fit_fewest(self, gang: Gang) -> bool | None:
        """None when nothing runs on the gang's platform; else whether its fewest domains have its GPUs free
        between them (a bound: False means no plan in them exists now)."""
        key = (gang.platform, gang.pod_sets)
        if key not in self._fits:
            self._fits[key] = self._may_fit(gang)
        return self._fits[key]

    def _may_fit(self, gang: Gang) -> bool | None:
        fleet = self._hold._fleet
        p = gang.platform
        if p not in self._free_most_first:
            bm = fleet.bitmap
            free = np.sort(bm.domain_free_gpus[bm.domain_platforms == p])[::-1]
            self._free_most_first[p] = np.cumsum(free) if split_wait.room_may_come(fleet, p) else None
        summed = self._free_most_first[p]
        if summed is None:
            return None
        least = self._hold.fewest_domains(gang)
        return len(summed) > 0 and int(summed[min(least, len(summed)) - 1]) >= gang.gpus


def rules_horizon(rules: Mapping[str, split_wait.SplitWait]) -> float:
    """How far back the backlog must reach: the longest window any rule prices a split over (its cap; a run's
    expected runtimes beyond it are priced over the cap)."""
    return max((rule.max_s for rule in rules.values() if rule.max_s > 0), default=split_wait.DEFAULT_MAX_S)


def make_hold(
    policy: object,
    fleet: Fleet,
    jobs: Sequence[TraceJob],
    cq_of: Sequence[str],
    *,
    settings: WaitSettings,
    overrides: dict[str, tuple[float | None, float | None]],
    cluster_queues: Sequence[str],
    split_slowdown: float,
) -> SplitHold | None:
    """The rule for a run of ``policy``, or None when no gang of it can ever wait (the run is then exactly what it
    was before the rule existed).

    ``overrides`` are each ClusterQueue's (factor, cap) from its own or its
    nearest Cohort's annotations, None where neither sets one;
    ``split_slowdown`` is the simulation's own, used only when the settings
    hand it over.
    """
    if not waits_for_fewer_domains(policy) or settings.runtime_estimate == "none":
        return None
    told = split_slowdown if settings.split_slowdown is None else settings.split_slowdown
    base = split_wait.SplitWait(settings.factor, settings.max_s, told)
    rules = {cq: split_wait.resolve(base, [overrides.get(cq, (None, None))]) for cq in cluster_queues}
    if not any(rule.enabled for rule in rules.values()):
        return None
    estimates = RuntimeEstimates(settings.runtime_estimate, jobs, cq_of, seed=settings.seed)
    return SplitHold(
        fleet,
        jobs,
        cq_of,
        rules=rules,
        estimates=estimates,
        keeps_quota=settings.holds == "quota",
        clock=settings.clock,
        price=settings.price,
    )
