"""When each pending gang is expected to start, and on which domains: ``squeue --start`` for a Kubernetes cluster.

Derived from the cluster's objects alone, at ``now``: nothing is kept, so
every replica and a restarted kilter give the same answer for the same
state. Three steps:

* **holdings**: every bound GPU pod that has not ended, grouped by its gang
  (``identity.key_of``; a pod of no gang is its own), holding its GPUs (the
  pod GPU reader's count) on its node until ``reservations.expected_end``.
  A gang started when its Workload was admitted (the ``Admitted``
  condition's ``lastTransitionTime``), else at its pods' earliest
  ``status.startTime``, else their earliest ``creationTimestamp``; it runs
  for what its job declares, else what its ClusterQueue's finished
  Workloads of its size took (``waits.expected_runtime``, the very reading
  the split wait uses). Without an estimate it never ends, so nothing is
  promised on its GPUs;
* **pending gangs in queue order**: Workloads not admitted (those holding
  quota first, being closest to running; then priority, high first, then
  creation, as Kueue's BestEffortFIFO orders its heads), Volcano PodGroups
  ``Pending`` or ``Inqueue`` and gangs of bare pods not yet bound (by
  creation), each with its pod sets and the domains it may take: 1 for a
  gang that requires one domain, every domain for an unconstrained one,
  else the fewest the idle fleet could hold it in
  (``split_wait.fewest_domains_idle``, what it waits for);
* **reservations**, gang after gang in that order, each by
  ``reservations.earliest_start`` around every earlier one's claim (asked
  through ``start_search.first_start``, its answer behind hundreds of
  reservations without summing them all at every moment). A start past
  the year 9999 rests on absurd estimates and is not promised.

What is read (``start_facts``) and when a job not yet queued would start
(``start_of_job``, ``plan_start``: ``kilter plan`` and the gRPC ``Plan``)
come from the same functions, so every door gives the same answer.

Conservative on purpose, as ``squeue --start`` is: every pending gang is
shown the start it would get were every gang ahead of it to run as
estimated, so users see when theirs comes, not only the head's. A gang with
no start shows why: a job annotation that does not read (its error, and the
other gangs still get theirs), a shape the idle fleet cannot hold, or room
that only jobs with no expected end could free. Topology only: quota is
Kueue's, and a gang its quota holds back starts no earlier than shown.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kilter.gangs.learned import learner_of
from kilter.gangs.queue_load import backlog_of, usable_gpus
from kilter.gangs.start_facts import Held, Waiting, held_gangs, job_gang, pending_gangs
from kilter.gangs.start_search import first_start
from kilter.gangs.wait_settings import QueueWaitRules
from kilter.gangs.waits import Learned
from kilter.model.errors import InputError
from kilter.state.cluster import ClusterState
from kilter.topology.backfill import worth_keeping
from kilter.topology.backlog import Backlog
from kilter.topology.fleet import Fleet
from kilter.topology.reservations import (
    Holding,
    Holdings,
    NodeSpace,
    Reservation,
    node_space,
    reason,
)
from kilter.topology.split_wait import QueueLoad, SplitWait, format_instant

__all__ = [
    "LAST_INSTANT_S",
    "RECENT_MAX_AGE_S",
    "ExpectedStart",
    "ExpectedStarts",
    "expected_starts",
    "plan_start",
    "reserve",
    "start_of_job",
    "start_of_request",
]

log = logging.getLogger("kilter.gangs")

RECENT_MAX_AGE_S = 10.0  # how old a running kilter's answer may be for a view, a Plan or a door: one per 10 s
LAST_INSTANT_S = 253_402_300_799.0  # 9999-12-31T23:59:59Z: a start past it rests on absurd estimates


@dataclass(frozen=True, slots=True)
class ExpectedStart:
    """A pending gang's promise (``reservation``, its ``domains`` by name) or, without one, ``reason`` why not."""

    gang: Waiting
    reservation: Reservation | None
    domains: tuple[str, ...]
    reason: str

    @property
    def start_s(self) -> float | None:
        return self.reservation.start_s if self.reservation is not None else None


@dataclass(frozen=True)
class ExpectedStarts:
    """Every pending gang's expected start at ``now_s``, in queue order, over ``holdings``; ``kept``: the
    reservations every door keeps (``keep``), and ``aliases`` the names their owners' pods know them by."""

    now_s: float
    holdings: tuple[Held, ...]
    starts: tuple[ExpectedStart, ...]
    kept: tuple[Reservation, ...] = ()
    aliases: Mapping[tuple[str, str], str] = field(default_factory=dict)
    _index: dict[tuple[str, str, str], ExpectedStart] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for s in self.starts:
            self._index.setdefault((s.gang.kind, s.gang.namespace, s.gang.name), s)

    def of(self, kind: str, namespace: str, name: str) -> ExpectedStart | None:
        return self._index.get((kind, namespace, name))

    @property
    def reservations(self) -> tuple[Reservation, ...]:
        return tuple(s.reservation for s in self.starts if s.reservation is not None)

    @property
    def held(self) -> int:
        """Pending gangs with a reservation (``kilter_reservations_held``)."""
        return sum(1 for s in self.starts if s.reservation is not None)

    def waits_for(self, start: ExpectedStart) -> tuple[tuple[Held, ...], tuple[ExpectedStart, ...]]:
        """A reservation's story: the running gangs on the nodes it is promised, by expected end (the ends it rests
        on), and the gangs ahead of it in the queue reserved on those nodes before it (they run there first)."""
        r = start.reservation
        if r is None:
            return (), ()
        claim = set(r.nodes)
        running = sorted(
            (h for h in self.holdings if not claim.isdisjoint(h.nodes)), key=lambda h: (h.expected_end_s, h.key)
        )
        ahead = []
        for other in self.starts:
            if other is start:
                break
            o = other.reservation
            if o is not None and o.start_s < r.start_s and not claim.isdisjoint(o.nodes):
                ahead.append(other)
        return tuple(running), tuple(ahead)

    def holdings_rows(self) -> Holdings:
        return Holdings.of(Holding(h.nodes, h.gpus, h.expected_end_s) for h in self.holdings)


def expected_starts(
    state: ClusterState,
    *,
    now_s: float,
    fleet: Fleet | None = None,
    learned: Learned | None = None,
    settings: QueueWaitRules | None = None,
    keep: bool = False,
) -> ExpectedStarts:
    """Every pending gang's expected start (module docstring). ``fleet`` defaults to the state's, ``learned`` to
    the runtimes its finished Workloads tell, ``settings`` (where a gang queues) to the state's own.

    With ``keep``, each ClusterQueue's oldest waiting gang bigger than a node
    gets a reservation every door keeps, when it is worth its price
    (``backfill.worth_keeping``, the simulator's rule): those are made first,
    around each other only, and every other gang is promised what is left
    around them, so what ``pending`` shows a kept gang is what the doors keep.
    """
    fleet = state.fleet() if fleet is None else fleet
    if learned is None:
        learned = learner_of(state.workloads, state.catalog.device_resources).estimate
    settings = QueueWaitRules.build(state, SplitWait()) if settings is None else settings
    held = held_gangs(state, fleet, now_s=now_s, learned=learned, settings=settings)
    gangs = pending_gangs(state, fleet, learned, settings)
    chosen = _kept_gangs(gangs, fleet, backlog_of(state), now_s) if keep else []
    first = dict(zip(chosen, reserve([gangs[i] for i in chosen], fleet, held, now_s), strict=True))
    kept = tuple(s.reservation for s in first.values() if s.reservation is not None)
    rest = iter(reserve([g for i, g in enumerate(gangs) if i not in first], fleet, held, now_s, kept))
    starts = tuple(first[i] if i in first else next(rest) for i in range(len(gangs)))
    return ExpectedStarts(
        now_s, tuple(held), starts, kept, _aliases(state, [s for s in first.values() if s.reservation])
    )


def _kept_gangs(gangs: Sequence[Waiting], fleet: Fleet, backlog: Backlog, now_s: float) -> list[int]:
    """The positions of the gangs whose reservations the doors keep: per ClusterQueue, its oldest waiting gang
    bigger than a node of its first platform, when ``backfill.worth_keeping`` says so."""
    seen: set[str] = set()
    out = []
    for i, gang in enumerate(gangs):
        if gang.problem or not gang.platforms or not gang.cluster_queue or gang.cluster_queue in seen:
            continue
        platform = fleet.platforms[gang.platforms[0][0]]
        gpus = sum(count * per_pod for count, per_pod in gang.pod_sets)
        if gpus <= platform.gpus_per_node:
            continue
        seen.add(gang.cluster_queue)
        load = None
        if gang.runtime_s is not None and math.isfinite(gang.created_s):
            waiting = backlog.mean_of_others(now_s, gang.runtime_s, gang.created_s)
            load = QueueLoad(waiting, usable_gpus(fleet, platform.name))
        if worth_keeping(gpus, platform.gpus_per_node, load):
            out.append(i)
    return out


def _aliases(state: ClusterState, kept: Iterable[ExpectedStart]) -> dict[tuple[str, str], str]:
    """(namespace, name) -> owner, for every name a kept gang's pods may know it by: its own, and for a Workload
    the jobs that own it (a Job's pods name the Job, not its Workload)."""
    out: dict[tuple[str, str], str] = {}
    owned = {(w.metadata.namespace, w.metadata.name): w.metadata.owner_references for w in state.workloads}
    for start in kept:
        gang = start.gang
        out[(gang.namespace, gang.name)] = gang.owner
        if gang.kind == "Workload":
            for ref in owned.get((gang.namespace, gang.name), ()):
                out.setdefault((gang.namespace, ref.name), gang.owner)
    return out


# ---------------------------------------------------------------- reservations


def _no_start_reason(gang: Waiting) -> str:
    if gang.problem:
        return gang.problem
    if not gang.platforms:
        return "no start: the idle fleet cannot hold it in the domains it may take"
    return (
        "no start can be promised: the GPUs it needs are held by jobs with no expected end "
        "(no kilter.dev/expected-runtime and no finished runs to learn from) or promised to gangs ahead of it "
        "with none"
    )


def start_of_request(
    owner: str,
    pod_sets: tuple[tuple[int, int], ...],
    platforms: tuple[tuple[int, int], ...],
    runtime_s: float | None,
    fleet: Fleet,
    holdings: Holdings,
    reservations: Sequence[Reservation],
    now_s: float,
    spaces: dict[int, NodeSpace] | None = None,
) -> Reservation | None:
    """The earliest reservation over the platforms a gang may run on (ties to the first), around
    ``reservations``; None when none comes (or only past ``LAST_INSTANT_S``)."""
    spaces = {} if spaces is None else spaces
    best: Reservation | None = None
    for platform, k in platforms:
        space = spaces.get(platform)
        if space is None:
            space = spaces[platform] = node_space(fleet, platform)
        found = first_start(owner, pod_sets, k, space, holdings, reservations, now_s, runtime_s)
        if found is not None and found.start_s <= LAST_INSTANT_S and (best is None or found.start_s < best.start_s):
            best = found
    return best


def reserve(
    gangs: Iterable[Waiting],
    fleet: Fleet,
    held: Sequence[Held],
    now_s: float,
    ahead: Sequence[Reservation] = (),
) -> list[ExpectedStart]:
    """Each gang's earliest start in turn, around every earlier one's reservation (after ``ahead``)."""
    holdings = Holdings.of(Holding(h.nodes, h.gpus, h.expected_end_s) for h in held)
    spaces: dict[int, NodeSpace] = {}
    reservations: list[Reservation] = list(ahead)
    named = fleet.domain_names()  # the sentence names domains as every view does
    out = []
    for gang in gangs:
        found = None
        if not gang.problem and gang.platforms:
            try:
                found = start_of_request(
                    gang.owner,
                    gang.pod_sets,
                    gang.platforms,
                    gang.runtime_s,
                    fleet,
                    holdings,
                    reservations,
                    now_s,
                    spaces,
                )
            except InputError as exc:
                gang = dataclasses.replace(gang, problem=str(exc))
        if found is None:
            out.append(ExpectedStart(gang, None, (), _no_start_reason(gang)))
            continue
        reservations.append(found)
        names = tuple(fleet.domain_ids[d] for d in found.domains)
        out.append(ExpectedStart(gang, found, names, reason(found, named)))
    return out


def start_of_job(
    starts: ExpectedStarts,
    state: ClusterState,
    fleet: Fleet,
    obj: Mapping[str, Any],
    *,
    learned: Learned | None = None,
    settings: QueueWaitRules | None = None,
) -> ExpectedStart:
    """When job ``obj`` (any job kind ``read_job`` reads, as received) would start were it queued behind every
    pending gang of ``starts`` (its own entry there, if any, left out): what ``kilter plan --now`` reports for a
    job that cannot start now."""
    if learned is None:
        learned = learner_of(state.workloads, state.catalog.device_resources).estimate
    settings = QueueWaitRules.build(state, SplitWait()) if settings is None else settings
    gang = job_gang(obj, fleet, created_s=starts.now_s, learned=learned, settings=settings)
    ahead = [r for r in starts.reservations if r.owner != gang.owner]
    return reserve([gang], fleet, starts.holdings, starts.now_s, ahead)[0]


def plan_start(
    obj: Mapping[str, Any],
    fleet: Fleet,
    *,
    now_s: float,
    starts_now: bool,
    starts: Callable[[], ExpectedStarts],
    state: ClusterState,
    learned: Learned | None = None,
    settings: QueueWaitRules | None = None,
) -> dict[str, Any]:
    """What ``kilter plan`` and the gRPC ``Plan`` add to a job's plan: ``expectedStart`` (``now_s`` for a job that
    ``starts_now``, else its reservation behind every pending gang of ``starts()``, or null), ``reservedDomains``
    and ``expectedStartReason`` (the reservation's sentence, or why there is none)."""
    if starts_now:
        return {"expectedStart": format_instant(now_s), "reservedDomains": [], "expectedStartReason": ""}
    found = start_of_job(starts(), state, fleet, obj, learned=learned, settings=settings)
    when = format_instant(found.start_s) if found.start_s is not None else None
    return {"expectedStart": when, "reservedDomains": list(found.domains), "expectedStartReason": found.reason}
