"""Maintenance planning: in which order, and when, to take scale-up domains out so that the least work is lost.

A maintenance (a firmware rollout, a cable swap, a rack's repair) takes
domains out of service, at most ``max_unavailable`` at once, each for
``step_s`` once its pods are gone. Taking a domain out kills what still runs
there; kilter knows what that is and roughly when it will end, so it can do
better than a rolling drain in name order.

**One currency: GPU-hours.** A job killed at ``t`` loses the work since its
last checkpoint, on all its GPUs (``Work.at_risk_gpu_h``: its GPUs × the
time since it started, or at most its checkpoint interval). Waiting for a
job to end loses nothing of it, but the domain is cordoned while it waits,
so its GPUs that are already free sit idle: that is charged too
(``idle``). Waiting is worth it exactly when the idle GPU-hours are fewer
than those the kill would lose; no tuned weight decides it.

**Within a step**, each domain's drain moment is the cheapest of: at once,
or when one of its jobs is expected to end (within ``max_wait_s``). A
min-runtime guard is a floor: a job is never evicted before it. Jobs that
span domains are killed once; a job that a domain drained earlier in the
plan killed is gone from the later ones. Preemptible jobs are evicted as
any other preemption would and weigh nothing in the choice (their loss is
still reported).

**The order.** Up to ``EXACT_LIMIT`` domains every order is tried (each
order cut into steps of ``max_unavailable``) and the cheapest kept. Beyond
it the order is built a step at a time by least regret: first the domains
whose deferral to the next step would cost most (a job with no known end
grows its loss the longer one waits; a job about to end makes its domain
cheaper later); then any two domains swap places while that makes the
plan cheaper (within ``SWAP_BUDGET`` orders: on random small fleets the
swaps bring the regret order from 11% to 3% above the optimum brute force
finds). Every order is timed two ways, each domain at its cheapest moment
and every domain at once (the cheapest moment of each is no optimum for the
step: a domain may wait for a job another domain kills), and the cheaper
kept. The rolling drain in name order is evaluated too, and the plan never
costs more than it (guards aside: the rolling drain breaks them).

Only what a cluster knows goes in: a job's expected end is its declared or
learned runtime (``None`` when unknown: it may run forever), never its
true one. The simulator and the ``kilter maintenance`` commands call this
same code.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

__all__ = [
    "EXACT_LIMIT",
    "DomainStep",
    "MaintenanceAsk",
    "MaintenancePlan",
    "Step",
    "Work",
    "evaluate",
    "naive_order",
    "plan_maintenance",
]

EXACT_LIMIT = 6
"""Domains up to which every order is tried (720 orders): a rack or two's repair is planned exactly."""
SWAP_BUDGET = 3000
"""Orders a larger plan's swap search evaluates at most: about 2 s for 48 domains, a compute bound, not a policy."""


@dataclass(frozen=True)
class Work:
    """A running job as the plan sees it: what a kill loses and when it is expected to end."""

    key: str
    gpus: int  # all its GPUs: a kill loses its work on every one of them
    placement: Mapping[str, int]  # domain -> its GPUs there
    started_s: float
    expected_end_s: float | None = None  # None: no declared or learned runtime
    checkpoint_s: float | None = None  # at most this much work is lost (None: all since it started)
    preemptible: bool = False
    guarded_until_s: float | None = None  # a min-runtime guard: never evicted before this
    pods: int = 1

    def at_risk_gpu_h(self, at_s: float) -> float:
        """The GPU-hours a kill at ``at_s`` loses."""
        lost = max(0.0, at_s - self.started_s)
        if self.checkpoint_s is not None:
            lost = min(lost, self.checkpoint_s)
        return self.gpus * lost / 3600.0

    def runs_at(self, at_s: float) -> bool:
        return self.expected_end_s is None or self.expected_end_s > at_s


@dataclass(frozen=True)
class MaintenanceAsk:
    """What is to be done: these domains (with their usable GPUs), at most ``max_unavailable`` out at once,
    each out for ``step_s`` once drained, from ``start_s``; a step never waits more than ``max_wait_s`` for
    jobs to end. ``window_end_s``: steps that would end after it are flagged (None: no window)."""

    domains: Mapping[str, int]
    start_s: float
    step_s: float
    max_unavailable: int = 1
    max_wait_s: float = 6 * 3600.0
    window_end_s: float | None = None


@dataclass(frozen=True)
class DomainStep:
    """One domain within a step: when it is drained, what it waits for and what it kills."""

    domain: str
    drain_s: float
    back_s: float
    waits_for: tuple[str, ...]  # jobs expected to end between the step's start and the drain
    evicts: tuple[Work, ...]  # jobs still running at the drain (killed here, first of their domains)
    lost_gpu_h: float  # their at-risk GPU-hours at the drain
    idle_gpu_h: float  # free GPUs of the cordoned domain while it waits

    @property
    def weighted_gpu_h(self) -> float:
        """What the plan minimises: idle GPU-hours plus the loss of the jobs that are not preemptible."""
        return self.idle_gpu_h + sum(w.at_risk_gpu_h(self.drain_s) for w in self.evicts if not w.preemptible)


@dataclass(frozen=True)
class Step:
    index: int
    begin_s: float  # its domains are cordoned
    domains: tuple[DomainStep, ...]

    @property
    def end_s(self) -> float:
        return max(d.back_s for d in self.domains)


@dataclass(frozen=True)
class MaintenancePlan:
    steps: tuple[Step, ...]
    method: str  # "exact", "regret" or "name order"
    naive_lost_gpu_h: float = 0.0  # the rolling drain in name order, for comparison
    naive_end_s: float = 0.0
    naive_killed: int = 0

    @property
    def lost_gpu_h(self) -> float:
        return sum(d.lost_gpu_h for s in self.steps for d in s.domains)

    @property
    def idle_gpu_h(self) -> float:
        return sum(d.idle_gpu_h for s in self.steps for d in s.domains)

    @property
    def killed(self) -> tuple[Work, ...]:
        return tuple(w for s in self.steps for d in s.domains for w in d.evicts)

    @property
    def end_s(self) -> float:
        return max((s.end_s for s in self.steps), default=0.0)


class _Board:
    """The jobs as one evaluation goes: which are gone (killed, with when) and, per domain, those on it."""

    def __init__(self, works: Iterable[Work]) -> None:
        self.on: dict[str, list[Work]] = {}
        for w in works:
            for domain, gpus in w.placement.items():
                if gpus > 0:
                    self.on.setdefault(domain, []).append(w)
        self.killed: dict[str, float] = {}

    def running(self, domain: str, at_s: float) -> list[Work]:
        return [w for w in self.on.get(domain, ()) if self.alive(w, at_s)]

    def alive(self, w: Work, at_s: float) -> bool:
        gone = self.killed.get(w.key)
        return (gone is None or gone > at_s) and w.runs_at(at_s)


def _end(board: _Board, w: Work) -> float | None:
    gone = board.killed.get(w.key)
    if gone is not None:
        return gone if w.expected_end_s is None else min(gone, w.expected_end_s)
    return w.expected_end_s


def _guarded_until(board: _Board, domain: str, at_s: float) -> float:
    """Until when min-runtime guards hold ``domain`` (its jobs running at ``at_s``), each until its guard or its
    job's expected end if sooner; -inf when none does."""
    out = -math.inf
    for w in board.running(domain, at_s):
        if w.guarded_until_s is not None:
            end = _end(board, w)
            out = max(out, w.guarded_until_s if end is None else min(w.guarded_until_s, end))
    return out


def _domain_choice(
    board: _Board, domain: str, capacity: int, begin_s: float, ask: MaintenanceAsk
) -> tuple[float, float, float, list[Work], list[Work]] | None:
    """The cheapest drain of ``domain`` in a step that begins at ``begin_s``: (weighted cost, drain moment, idle
    GPU-hours, jobs waited for, jobs killed), or None when a guard keeps it past the longest wait."""
    here = board.running(domain, begin_s)
    floor = max(begin_s, _guarded_until(board, domain, begin_s))
    if floor > begin_s + ask.max_wait_s:
        return None
    ends = sorted({e for w in here if (e := _end(board, w)) is not None and floor < e <= begin_s + ask.max_wait_s})
    best: tuple[float, float, float, list[Work], list[Work]] | None = None
    for drain in [floor, *ends]:
        idle = _idle_gpu_h(board, domain, capacity, here, begin_s, drain)
        killed = [w for w in here if board.alive(w, drain)]
        lost = sum(w.at_risk_gpu_h(drain) for w in killed if not w.preemptible)
        cost = idle + lost  # DomainStep.weighted_gpu_h
        if best is None or cost < best[0] - 1e-9:
            waited = [w for w in here if not board.alive(w, drain)]
            best = (cost, drain, idle, waited, killed)
    return best


def _idle_gpu_h(board: _Board, domain: str, capacity: int, here: list[Work], begin_s: float, drain_s: float) -> float:
    """The domain's free GPUs, integrated from the cordon to the drain, as its jobs end one by one."""
    if drain_s <= begin_s:
        return 0.0
    points = sorted(
        {begin_s, drain_s, *(e for w in here if (e := _end(board, w)) is not None and begin_s < e < drain_s)}
    )
    idle = 0.0
    for a, b in itertools.pairwise(points):
        busy = sum(w.placement.get(domain, 0) for w in here if board.alive(w, a))
        idle += max(0, capacity - busy) * (b - a)
    return idle / 3600.0


def _take(board: _Board, ask: MaintenanceAsk, domain: str, begin_s: float) -> DomainStep | None:
    choice = _domain_choice(board, domain, ask.domains[domain], begin_s, ask)
    if choice is None:
        return None
    _, drain, idle, waited, killed = choice
    for w in killed:
        board.killed[w.key] = drain
    lost = sum(w.at_risk_gpu_h(drain) for w in killed)
    waits = tuple(sorted(w.key for w in waited))
    evicts = tuple(sorted(killed, key=lambda w: w.key))
    return DomainStep(domain, drain, drain + ask.step_s, waits, evicts, lost, idle)


def _steps_in_order(ask: MaintenanceAsk, works: Sequence[Work], order: Sequence[str]) -> tuple[list[Step], float]:
    """``order`` cut into steps of ``max_unavailable``, each beginning when the one before is back; with the
    weighted cost (idle plus non-preemptible loss). A domain a guard holds waits, its step beginning later."""
    board = _Board(works)
    steps: list[Step] = []
    cost = 0.0
    begin = ask.start_s
    k = max(1, ask.max_unavailable)
    for i in range(0, len(order), k):
        batch = order[i : i + k]
        for domain in batch:  # a min-runtime guard beyond the longest wait: the step begins when it allows
            begin = max(begin, _guarded_until(board, domain, begin) - ask.max_wait_s)
        taken = []
        for domain in batch:
            step = _take(board, ask, domain, begin)
            assert step is not None
            taken.append(step)
        taken = _recounted(board, ask, begin, _killed_once(board, taken))
        steps.append(Step(len(steps), begin, tuple(taken)))
        cost += sum(d.weighted_gpu_h for d in taken)
        begin = steps[-1].end_s
    return steps, cost


def _killed_once(board: _Board, taken: list[DomainStep]) -> list[DomainStep]:
    """A job on two domains of one step is killed by the earlier drain of the two, and charged there only."""
    first: dict[str, tuple[float, int]] = {}
    for i, d in enumerate(taken):
        for w in d.evicts:
            if w.key not in first or d.drain_s < first[w.key][0]:
                first[w.key] = (d.drain_s, i)
    out = []
    for i, d in enumerate(taken):
        mine = tuple(w for w in d.evicts if first[w.key][1] == i)
        for w in mine:
            board.killed[w.key] = d.drain_s
        if mine != d.evicts:
            d = replace(d, evicts=mine, lost_gpu_h=sum(w.at_risk_gpu_h(d.drain_s) for w in mine))
        out.append(d)
    return out


def _recounted(board: _Board, ask: MaintenanceAsk, begin_s: float, taken: list[DomainStep]) -> list[DomainStep]:
    """Each domain's idle GPU-hours counted again once the step's kills are settled: a job another domain of the
    step killed earlier leaves its GPUs here idle from then on."""
    out = []
    for d in taken:
        here = board.running(d.domain, begin_s)
        idle = _idle_gpu_h(board, d.domain, ask.domains[d.domain], here, begin_s, d.drain_s)
        out.append(replace(d, idle_gpu_h=idle) if idle != d.idle_gpu_h else d)
    return out


def _regret_order(ask: MaintenanceAsk, works: Sequence[Work], domains: Sequence[str]) -> list[str]:
    """Step by step, the domains whose deferral by one step would cost most go first (module docstring)."""
    board = _Board(works)
    left = list(domains)
    order: list[str] = []
    begin = ask.start_s
    k = max(1, ask.max_unavailable)
    while left:
        later = begin + ask.step_s
        backs = []
        for _ in range(min(k, len(left))):
            scored = []
            for d in left:
                now = _domain_choice(board, d, ask.domains[d], begin, ask)
                if now is None:
                    continue
                deferred = _domain_choice(board, d, ask.domains[d], later, ask)
                regret = (deferred[0] if deferred is not None else now[0]) - now[0]
                scored.append((-regret, now[0], d))
            if not scored:
                break
            pick = min(scored)[2]
            step = _take(board, ask, pick, begin)
            assert step is not None
            left.remove(pick)
            order.append(pick)
            backs.append(step.back_s)
        # with none taken, every domain left is guarded beyond the longest wait: begin when the first guard allows
        begin = max(backs) if backs else min(_guarded_until(board, d, begin) for d in left) - ask.max_wait_s
    return order


def _swapped(ask: MaintenanceAsk, works: Sequence[Work], order: list[str]) -> list[str]:
    """``order`` improved by swapping any two domains while a swap makes the plan cheaper (first improvement)."""
    best = list(order)
    _, cost = _steps_in_order(ask, works, best)
    budget = SWAP_BUDGET
    improved = True
    while improved and budget > 0:
        improved = False
        for i, j in itertools.combinations(range(len(best)), 2):
            if budget <= 0:
                break
            trial = list(best)
            trial[i], trial[j] = trial[j], trial[i]
            budget -= 1
            _, trial_cost = _steps_in_order(ask, works, trial)
            if trial_cost < cost - 1e-6:
                best, cost, improved = trial, trial_cost, True
    return best


def naive_order(domains: Iterable[str]) -> list[str]:
    """The rolling drain a script does: domain by domain in name order."""
    return sorted(domains)


def evaluate(ask: MaintenanceAsk, works: Sequence[Work], order: Sequence[str], method: str) -> MaintenancePlan:
    """The plan that takes the domains in ``order`` (each drained at its cheapest moment in its step)."""
    steps, _ = _steps_in_order(ask, _running(ask, works), order)
    return MaintenancePlan(tuple(steps), method)


def _running(ask: MaintenanceAsk, works: Sequence[Work]) -> list[Work]:
    """The works as planned: one expected to have ended by the start but still running has no known end (it
    runs on, and a drain kills it), never none at all."""
    return [
        replace(w, expected_end_s=None) if w.expected_end_s is not None and w.expected_end_s <= ask.start_s else w
        for w in works
    ]


def plan_maintenance(ask: MaintenanceAsk, works: Sequence[Work]) -> MaintenancePlan:
    """The order and timing that lose the fewest GPU-hours (module docstring), with the naive drain's figures."""
    works = _running(ask, works)
    domains = naive_order(ask.domains)
    naive = evaluate(_naive(ask), [replace(w, guarded_until_s=None) for w in works], domains, "name order")
    orders: Iterable[Sequence[str]]
    if len(domains) <= EXACT_LIMIT:
        method, orders = "exact", itertools.permutations(domains)
    else:
        method, orders = "regret", [_swapped(ask, works, _regret_order(ask, works, domains))]
    best: tuple[float, float, str, list[Step]] | None = None
    # evicting at once, guards kept: per domain the cheapest moment is no global optimum
    timings = (ask, _naive(ask)) if ask.max_wait_s > 0 else (ask,)
    for order in [*orders, *(() if method == "exact" else (domains,))]:  # exact: name order is among the orders
        label = method if list(order) != domains or method == "exact" else "name order, timed"
        for timing in timings:
            steps, cost = _steps_in_order(timing, works, order)
            end = max((s.end_s for s in steps), default=ask.start_s)
            if best is None or (round(cost, 9), end) < (round(best[0], 9), best[1]):
                best = (cost, end, label, steps)
    assert best is not None
    return MaintenancePlan(tuple(best[3]), best[2], naive.lost_gpu_h, naive.end_s, len(naive.killed))


def _naive(ask: MaintenanceAsk) -> MaintenanceAsk:
    """The rolling drain a script does: it evicts at once (no waiting), blind to min-runtime guards."""
    return replace(ask, max_wait_s=0.0)
