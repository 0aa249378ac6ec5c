"""Which pending workload Kueue considers next, whether it fits, and what it would preempt.

``assign_flavors`` is Kueue's flavor assignment with default fungibility:
per resource group, the first flavor where every requested resource fits
``available`` (borrowing allowed) wins; otherwise the first flavor where it
fits ``potential_available`` is taken in preemption mode; otherwise the
workload can never fit (``ExceedsMaxQuota``).

``admission_order`` replays scheduling cycles. Each cycle nominates the head
of every ClusterQueue (priority, then creation time, then UID); with fair
sharing, heads are popped one at a time by the tournament over each root
cohort (``fair_sharing_iterator.go``): at every cohort the child whose
nominee leaves it not borrowing on the requested flavors wins
(``FairSharingPrioritizeNonBorrowing``), then the lower share with the
workload, then higher priority, then the earlier workload; remaining ties go
to the first child by name (Kueue leaves them to map order). Without fair
sharing the classical order applies: fits-in-nominal first, then priority,
then FIFO. A popped workload that fits is admitted into the simulation, so
later decisions see its usage; one that needs preemption is reported with
its targets, which are not evicted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from kilter.quota.afs import AFS_MODE
from kilter.quota.available import available, fits_within_quota, potential_available
from kilter.quota.config import FairSharingConfig
from kilter.quota.drs import DRS, compare
from kilter.quota.preempt import PreemptionTargets, find_targets
from kilter.quota.shares import Shares
from kilter.quota.tree import FR, QuotaNode, QuotaTree
from kilter.quota.usage import WorkloadInfo
from kilter.quota.whatif import Journal

__all__ = [
    "ADMIT",
    "NEVER",
    "PREEMPT",
    "WAIT",
    "AdmissionDecision",
    "Assignment",
    "admission_order",
    "assign_flavors",
    "by_cluster_queue",
    "nominee_order",
]


def by_cluster_queue(workloads: Iterable[WorkloadInfo]) -> dict[str, list[WorkloadInfo]]:
    """Workloads holding quota, grouped per ClusterQueue (the shape ``admission_order`` reads)."""
    out: dict[str, list[WorkloadInfo]] = {}
    for w in workloads:
        if w.reserved:
            out.setdefault(w.cluster_queue, []).append(w)
    return out


ADMIT = "admit"
PREEMPT = "preempt"
WAIT = "wait"
NEVER = "never"


@dataclass(frozen=True)
class Assignment:
    """Flavors per resource and the usage they imply; ``mode`` fit / preempt / nofit."""

    mode: str
    flavors: Mapping[str, str] = field(default_factory=dict)
    usage: Mapping[FR, int] = field(default_factory=dict)
    reason: str = ""


def assign_flavors(cq: QuotaNode, requests: Mapping[str, int]) -> Assignment:
    """Kueue's flavor assignment for a workload's total requests in ``cq``."""
    wanted = {r: v for r, v in requests.items() if v > 0}
    covered = {r for res, _ in cq.groups for r in res}
    missing = sorted(set(wanted) - covered)
    if missing:
        return Assignment("nofit", reason=f"resource {missing[0]} unavailable in ClusterQueue {cq.name}")
    flavors: dict[str, str] = {}
    usage: dict[FR, int] = {}
    mode = "fit"
    for resources, group_flavors in cq.groups:
        asked = [r for r in resources if r in wanted]
        if not asked:
            continue
        chosen = None
        preempt_choice = None
        for flavor in group_flavors:
            if all(wanted[r] <= available(cq, (flavor, r)) for r in asked):
                chosen = flavor
                break
            if preempt_choice is None and all(wanted[r] <= potential_available(cq, (flavor, r)) for r in asked):
                preempt_choice = flavor
        if chosen is None and preempt_choice is None:
            r = asked[0]
            most = max((potential_available(cq, (f, r)) for f in group_flavors), default=0)
            return Assignment(
                "nofit", reason=f"{r} request {wanted[r]} exceeds what ClusterQueue {cq.name} could ever hold ({most})"
            )
        if chosen is None:
            chosen = preempt_choice
            mode = "preempt"
        assert chosen is not None
        for r in asked:
            flavors[r] = chosen
            usage[(chosen, r)] = wanted[r]
    return Assignment(mode, flavors, usage)


@dataclass(frozen=True)
class AdmissionDecision:
    """What happens to one pending workload when its turn comes."""

    position: int
    cycle: int
    workload: WorkloadInfo
    outcome: str
    share: DRS | None = None
    flavors: Mapping[str, str] = field(default_factory=dict)
    preemption: PreemptionTargets | None = None
    reason: str = ""
    shortfall: Mapping[FR, tuple[int, int]] = field(default_factory=dict)
    """For a workload that must wait or preempt: per flavor/resource it asks more of than is ``available`` when
    its turn comes, (what it asks, what is available, clamped at 0), in canonical units."""


def _queue_key(w: WorkloadInfo, lq_usage: Mapping[tuple[str, str], float] | None) -> tuple[object, ...]:
    """A ClusterQueue's heap order: (admission fair sharing) lighter LocalQueue, priority, creation, UID."""
    usage = lq_usage.get((w.namespace, w.local_queue), 0.0) if lq_usage is not None else 0.0
    return (usage, -w.priority, w.created_s, w.uid)


@dataclass
class _Entry:
    workload: WorkloadInfo
    cq: QuotaNode
    assignment: Assignment


class _Tournament:
    """One cycle's pops over a root cohort (``runTournament`` with ``computeDRS``).

    A nominee's shares (its queue's and each ancestor's, with the nominee
    added) only change when usage changes below the root on its path, so they
    are kept between pops and dropped for nominees that share a non-root
    ancestor with a queue that was just served.
    """

    def __init__(self, shares: Shares, config: FairSharingConfig) -> None:
        self.shares = shares
        self.config = config
        self.cache: dict[str, dict[int, DRS]] = {}
        self.paths: dict[str, set[int]] = {}

    def served(self, cq: QuotaNode) -> None:
        """Forget the shares a change in ``cq``'s usage may have moved."""
        changed = {id(n) for n in (cq, *cq.ancestors()) if n.parent is not None}
        for uid in [u for u, path in self.paths.items() if path & changed]:
            del self.cache[uid]
            del self.paths[uid]

    def _values(self, entry: _Entry) -> dict[int, DRS]:
        uid = entry.workload.uid
        cached = self.cache.get(uid)
        if cached is None:
            cached = {}
            journal = Journal()
            journal.add(entry.cq, entry.assignment.usage)
            share = self.shares.of(entry.cq)
            for ancestor in entry.cq.ancestors():
                cached[id(ancestor)] = share
                share = self.shares.of(ancestor)
            journal.undo()
            self.cache[uid] = cached
            self.paths[uid] = {id(n) for n in (entry.cq, *entry.cq.ancestors()) if n.parent is not None}
        return cached

    def pop(self, root: QuotaNode, heads: dict[str, _Entry]) -> _Entry | None:
        drs: dict[tuple[int, str], DRS] = {}
        live: set[int] = set()
        for entry in heads.values():
            if entry.cq.root() is not root:
                continue
            live.update(id(a) for a in entry.cq.ancestors())
            for node_id, value in self._values(entry).items():
                drs[(node_id, entry.workload.uid)] = value
        return self._run(root, heads, drs, live)

    def _run(
        self, cohort: QuotaNode, heads: dict[str, _Entry], drs: dict[tuple[int, str], DRS], live: set[int]
    ) -> _Entry | None:
        """The winner under ``cohort``, descending only into cohorts with a head below them (``live``)."""
        candidates: list[_Entry] = []
        for child in cohort.child_cohorts:
            if id(child) not in live:
                continue
            winner = self._run(child, heads, drs, live)
            if winner is not None:
                candidates.append(winner)
        for cq in cohort.child_cqs:
            if cq.name in heads:
                candidates.append(heads[cq.name])
        if not candidates:
            return None
        best = candidates[0]
        for current in candidates[1:]:
            if self._less(current, best, cohort, drs):
                best = current
        return best

    def _less(self, a: _Entry, b: _Entry, cohort: QuotaNode, drs: Mapping[tuple[int, str], DRS]) -> bool:
        a_drs = drs[(id(cohort), a.workload.uid)]
        b_drs = drs[(id(cohort), b.workload.uid)]
        if self.config.prioritize_non_borrowing:
            a_b = a_drs.is_borrowing_on(a.assignment.usage)
            b_b = b_drs.is_borrowing_on(b.assignment.usage)
            if a_b != b_b:
                return not a_b
        c = compare(a_drs, b_drs)
        if c:
            return c < 0
        if self.config.priority_sorting_within_cohort and a.workload.priority != b.workload.priority:
            return a.workload.priority > b.workload.priority
        return a.workload.created_s < b.workload.created_s


def _classical_key(e: _Entry) -> tuple[object, ...]:
    borrows = not fits_within_quota(e.cq, e.assignment.usage)
    return (borrows, -e.workload.priority, e.workload.created_s, e.workload.uid)


def admission_order(
    tree: QuotaTree,
    pending: Iterable[WorkloadInfo],
    admitted: Mapping[str, Sequence[WorkloadInfo]],
    *,
    config: FairSharingConfig,
    now: float,
    lq_usage: Mapping[tuple[str, str], float] | None = None,
) -> list[AdmissionDecision]:
    """Every pending workload in the order Kueue would consider it, with its outcome.

    ``admitted`` maps each ClusterQueue to the workloads holding its quota;
    ``lq_usage`` (from ``afs.local_queue_usage``) orders LocalQueues of queues
    in admission-fair-sharing mode.
    The tree's usage is restored afterwards.
    """
    queues: dict[str, list[WorkloadInfo]] = {}
    homeless: list[tuple[WorkloadInfo, str]] = []
    for w in pending:
        cq = tree.cluster_queues.get(w.cluster_queue)
        if cq is None or not cq.active:
            why = "no ClusterQueue" if not w.cluster_queue else f"ClusterQueue {w.cluster_queue} is missing or inactive"
            homeless.append((w, why))
            continue
        queues.setdefault(cq.name, []).append(w)
    for name, q in queues.items():
        q.sort(
            key=partial(_queue_key, lq_usage=lq_usage if tree.cluster_queues[name].admission_mode == AFS_MODE else None)
        )
    by_cq: dict[str, Sequence[WorkloadInfo]] = dict(admitted)
    shares = Shares(tree, now=now)
    journal = Journal()
    ordered: list[AdmissionDecision] = []
    try:
        cycle = 0
        while any(queues.values()):
            cycle += 1
            heads = {name: q.pop(0) for name, q in queues.items() if q}
            entries = {
                name: _Entry(w, tree.cluster_queues[name], assign_flavors(tree.cluster_queues[name], w.requests))
                for name, w in heads.items()
            }
            for entry in _cycle_order(entries, shares, config):
                ordered.append(
                    _decide(tree, entry, by_cq, shares, journal, config, now, cycle, len(ordered) + 1, lq_usage)
                )
    finally:
        journal.undo()
    return ordered + [
        AdmissionDecision(len(ordered) + i + 1, 0, w, NEVER, reason=why) for i, (w, why) in enumerate(homeless)
    ]


def nominee_order(
    tree: QuotaTree, heads: Mapping[str, WorkloadInfo], *, config: FairSharingConfig, now: float
) -> Iterator[tuple[WorkloadInfo, Assignment]]:
    """One scheduling cycle: each ClusterQueue's head, in the order Kueue pops them, with its flavor assignment.

    For callers that decide admission themselves (the simulator also needs a
    placement). Lazy, as in ``admission_order``: book the popped head's usage
    in its ClusterQueue before asking for the next, and the next pop sees it.
    """
    shares = Shares(tree, now=now)
    entries = {
        name: _Entry(w, tree.cluster_queues[name], assign_flavors(tree.cluster_queues[name], w.requests))
        for name, w in heads.items()
    }
    for entry in _cycle_order(entries, shares, config):
        yield entry.workload, entry.assignment


def _cycle_order(entries: dict[str, _Entry], shares: Shares, config: FairSharingConfig) -> Iterable[_Entry]:
    """The cycle's entries, popped lazily so each pop sees the admissions before it."""
    if not config.enabled:
        yield from sorted(entries.values(), key=_classical_key)
        return
    tournament = _Tournament(shares, config)
    remaining = dict(entries)
    while remaining:
        first = remaining[min(remaining)]
        if first.cq.parent is None:
            del remaining[first.cq.name]
            yield first
            continue
        winner = tournament.pop(first.cq.root(), remaining)
        assert winner is not None
        del remaining[winner.cq.name]
        yield winner
        tournament.served(winner.cq)


def _decide(
    tree: QuotaTree,
    entry: _Entry,
    admitted: dict[str, Sequence[WorkloadInfo]],
    shares: Shares,
    journal: Journal,
    config: FairSharingConfig,
    now: float,
    cycle: int,
    position: int,
    lq_usage: Mapping[tuple[str, str], float] | None,
) -> AdmissionDecision:
    w, cq = entry.workload, entry.cq
    assignment = assign_flavors(cq, w.requests)
    share = shares.of(cq, assignment.usage) if assignment.usage else None
    if assignment.mode == "nofit":
        return AdmissionDecision(position, cycle, w, NEVER, share, reason=assignment.reason)
    if assignment.mode == "fit":
        journal.add(cq, assignment.usage)
        admitted[cq.name] = [
            *admitted.get(cq.name, ()),
            WorkloadInfo(
                w.namespace,
                w.name,
                w.uid,
                cq.name,
                w.local_queue,
                w.priority,
                w.created_s,
                True,
                now,
                usage=assignment.usage,
            ),
        ]
        return AdmissionDecision(position, cycle, w, ADMIT, share, assignment.flavors)
    short = {fr: (v, max(0, available(cq, fr))) for fr, v in assignment.usage.items() if v > available(cq, fr)}
    afs = lq_usage if cq.admission_mode == AFS_MODE else None
    result = find_targets(tree, admitted, cq, w, assignment.usage, config=config, shares=shares, now=now, lq_usage=afs)
    outcome = PREEMPT if result.targets else WAIT
    return AdmissionDecision(position, cycle, w, outcome, share, assignment.flavors, result, result.reason, short)
