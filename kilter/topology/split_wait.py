"""Rent or buy: when a *preferred* gang should wait for room in fewer scale-up domains.

A gang spread over more domains than it needs runs slower for its whole life
(every collective crosses the scale-out network). Starting it now, split,
costs about ``split_slowdown × extra domains × its runtime``; waiting costs the
time waited. Like the ski-rental rule, waiting up to what a split would cost
and then taking the best plan at hand is never worse than twice the better of
the two choices made with hindsight, and needs no forecast of when room frees
up — only the job's own expected runtime, which is why the budget scales with
each job's estimate and not with one constant for every job.

The budget is ``factor × split_slowdown × extra domains × expected runtime``,
capped at ``max_s``; ``factor`` 0 turns the rule off. The caller says when the
clock started (``kilter.gangs.waits``: a Workload's quota reservation, else its
creation; the simulator, its own), read from the objects, so every replica and
restart reaches the same answer without keeping state. A gang with no runtime
estimate never waits: the rule must not hold a job on a guess it cannot make.
``required`` gangs never wait here; they already wait for their one domain.

Every path that places a gang (extender, Volcano verbs, AdmissionCheck,
webhook, ``kilter plan``, simulator) asks ``decide``.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from kilter.model.durations import parse_duration
from kilter.model.errors import InputError
from kilter.model.kueue import ClusterQueue, Cohort
from kilter.topology.fleet import Fleet

__all__ = [
    "DEFAULT_FACTOR",
    "DEFAULT_MAX_S",
    "DEFAULT_SPLIT_SLOWDOWN",
    "SPLIT_WAIT",
    "SPLIT_WAIT_MAX",
    "QueueLoad",
    "QueueProblem",
    "QueueSettings",
    "Setting",
    "SplitWait",
    "WaitDecision",
    "decide",
    "fewest_domains_idle",
    "format_duration",
    "format_instant",
    "nearest",
    "parse_split_wait",
    "queue_settings",
    "resolve",
    "room_may_come",
]

SPLIT_WAIT = "kilter.dev/split-wait"
"""ClusterQueue, Cohort or job annotation: the factor of the wait budget (a number >= 0; ``0`` turns waiting off)."""

SPLIT_WAIT_MAX = "kilter.dev/split-wait-max"
"""ClusterQueue, Cohort or job annotation: the longest a gang waits for fewer domains (a duration, ``24h``)."""

Setting = tuple[float | None, float | None]
"""(factor, cap in seconds) one object's annotations set; None where it sets none."""

DEFAULT_FACTOR = 1.0
DEFAULT_MAX_S = 24 * 3600.0  # docs/sim/split-wait-study.md: never 1 % worse than 6h, up to 9 % better when loaded
DEFAULT_SPLIT_SLOWDOWN = 0.2
MAX_FACTOR = 100.0


@dataclass(frozen=True, slots=True)
class SplitWait:
    """The rule's settings: budget = factor × split_slowdown × extra domains × expected runtime, at most max_s."""

    factor: float = DEFAULT_FACTOR
    max_s: float = DEFAULT_MAX_S
    split_slowdown: float = DEFAULT_SPLIT_SLOWDOWN

    def __post_init__(self) -> None:
        for name, value in (("factor", self.factor), ("max_s", self.max_s), ("split_slowdown", self.split_slowdown)):
            if not math.isfinite(value) or value < 0:
                raise InputError(f"split wait {name} must be a finite number >= 0, not {value}")

    @property
    def enabled(self) -> bool:
        return self.factor > 0 and self.max_s > 0 and self.split_slowdown > 0

    def budget_s(
        self, extra_domains: int, expected_runtime_s: float | None, load: QueueLoad | None = None, gpus: int = 0
    ) -> float:
        """How long a gang of ``gpus`` GPUs whose best plan uses ``extra_domains`` more than its minimum may wait in
        all: the split's price, its own slowdown and, on a saturated fleet (``load``), what it takes from the queue."""
        if not self.enabled or extra_domains <= 0 or expected_runtime_s is None or expected_runtime_s <= 0:
            return 0.0
        own = self.factor * self.split_slowdown * extra_domains * expected_runtime_s
        if load is not None and load.saturated:
            return math.inf  # the cap bounds what a gang pays itself; on a saturated fleet a split costs the queue
        return min(own * (load.price_multiplier(gpus) if load is not None else 1.0), self.max_s)


@dataclass(frozen=True, slots=True)
class QueueLoad:
    """The queue a split would cost, as the gang deciding sees it: how many jobs waited for GPUs, on average, over
    the recent past as long as the gang's expected run (``backlog.Backlog``), and the fleet's usable GPUs.

    A split gang burns ``slowdown × its GPUs × its runtime`` more GPU-seconds
    than it would in its fewest domains. Where nothing waits those
    GPU-seconds were idle anyway and cost no one; on a saturated fleet they
    come out of the backlog, and each waiting job starts about ``extra
    GPU-seconds ÷ usable GPUs`` later. So the split's full price is its own
    slowdown times ``1 + waiting jobs × gang GPUs ÷ usable GPUs``
    (``price_multiplier``): on a long queue it dwarfs any wait within the
    cap, and the gang waits for its fewest domains as a required one would;
    on a queue that is empty it is the gang's own slowdown alone. Every term
    is what a cluster knows; the future queue is forecast by the recent past.
    """

    waiting_jobs: float
    usable_gpus: int

    def __post_init__(self) -> None:
        if not math.isfinite(self.waiting_jobs) or self.waiting_jobs < 0 or self.usable_gpus < 0:
            raise InputError(f"a queue load counts nothing below 0: {self}")

    def price_multiplier(self, gpus: int) -> float:
        """The split's full price over its own slowdown (the class docstring)."""
        if self.saturated:
            return math.inf
        if self.usable_gpus <= 0:
            return 1.0
        return 1.0 + self.waiting_jobs * max(gpus, 0) / self.usable_gpus

    @property
    def saturated(self) -> bool:
        """At least one job waited all along, on average: the backlog outlasts the gang's run, so every extra
        GPU-second it burns delays every job behind it and no wait is too dear (the class docstring)."""
        return self.waiting_jobs >= 1


@dataclass(frozen=True, slots=True)
class WaitDecision:
    """Whether to hold the gang back now; ``remaining_s`` until it takes what it has; ``reason`` for people.

    ``until_s`` (Unix seconds) is when the budget runs out and ``standing`` the reason with that moment in place
    of the time left, when the caller told ``decide`` when the clock started: the same sentence from one
    judgement to the next while only the clock moves, for an answer that stays written (the AdmissionCheck's
    Pending message) where a countdown would be rewritten every round.
    """

    wait: bool
    remaining_s: float = 0.0
    reason: str = ""
    until_s: float | None = None
    standing: str = ""


def decide(
    rule: SplitWait,
    *,
    domains_now: int,
    domains_min: int,
    expected_runtime_s: float | None,
    waited_s: float,
    started_s: float | None = None,
    load: QueueLoad | None = None,
    gpus: int = 0,
) -> WaitDecision:
    """Wait while the best plan now needs more domains than the minimum and the budget is not yet spent.

    ``started_s`` (Unix seconds, optional) is when the clock started, ``waited_s`` before now: given, the
    decision also says when the budget runs out (``until_s``, ``standing``). ``load`` (optional) prices the
    split by what it takes from the queue too (``QueueLoad``), for a gang of ``gpus`` GPUs.
    """
    extra = domains_now - domains_min
    budget = rule.budget_s(extra, expected_runtime_s, load, gpus)
    remaining = budget - max(waited_s, 0.0)
    if remaining <= 0:
        return WaitDecision(False)
    plural = "s" if domains_min != 1 else ""
    room = f"for room in {domains_min} domain{plural}; {domains_now} available now"
    if math.isinf(budget):
        queued = f"while jobs queue behind it: a split would slow them ({room})"
        return WaitDecision(True, math.inf, f"waiting {queued}", None, f"waiting {queued}")
    reason = f"waiting up to {format_duration(remaining)} {room}"
    if started_s is None:
        return WaitDecision(True, remaining, reason)
    until = started_s + budget
    return WaitDecision(True, remaining, reason, until, f"waiting until {format_instant(until)} {room}")


def format_duration(seconds: float) -> str:
    """``1h40m``, ``3m20s``, ``45s``, ``2d3h``: the two largest units, rounded up, as kubectl prints ages."""
    s = max(math.ceil(seconds), 0)
    units = ((86400, "d"), (3600, "h"), (60, "m"), (1, "s"))
    for i, (size, name) in enumerate(units[:-1]):
        if s >= size:
            small, small_name = units[i + 1]
            whole, rest = divmod(s, size)
            part = -(-rest // small)
            if part * small == size:
                whole, part = whole + 1, 0
            return f"{whole}{name}" + (f"{part}{small_name}" if part else "")
    return f"{s}s"


def format_instant(unix_s: float) -> str:
    """RFC 3339 in UTC to the whole second, rounded up (``2026-12-01T12:00:00Z``): a wait's end is never shown
    before it comes."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(math.ceil(unix_s)))


def fewest_domains_idle(fleet: Fleet, platform: int, pod_sets: tuple[tuple[int, int], ...]) -> int:
    """The fewest scale-up domains of ``platform`` that could hold the gang were every usable GPU idle.

    A lower bound, exact for a gang of one pod shape: each pod set alone, in
    pods that fit whole usable nodes, and the gang's GPUs in all must fit the
    largest domains. Failed trays count against their rack, so a damaged
    fleet's minimum is honest. 0 when even the idle fleet cannot hold it.
    What the wait rule weighs a plan against: the best that waiting could
    bring now. A split's cost counts from another minimum, the platform's
    (``Platform.unsplit_domains``), which failures do not move.

    Remembered per fleet: the answer depends only on which nodes are usable
    and their GPU counts, which change far less often than it is asked (each
    gRPC Plan, each pending Workload ``pending`` judges).
    """
    bm = fleet.bitmap
    shape = hashlib.blake2b(bm.node_usable_flags.tobytes(), digest_size=16)
    shape.update(bm.node_gpu_counts.tobytes())
    key = (shape.digest(), platform, tuple(pod_sets))
    memo = fleet.idle_cover_memo()
    found = memo.get(key)
    if found is None:
        found = memo[key] = _fewest_domains_idle(fleet, platform, pod_sets)
    return found


def room_may_come(fleet: Fleet, platform: int) -> bool:
    """Whether waiting could bring a gang better room on ``platform``: some usable GPU of it is in use, so a job may
    end and free it. Where nothing runs, the plan now is the best the fleet gives until it grows, and the fewest
    domains the idle fleet could hold the gang in is a bound that plan may never reach (gangs of mixed pod shapes):
    a wait would only stall, and two gangs each waiting for the queue's sake would wait on each other for ever."""
    bm = fleet.bitmap
    mine = bm.domain_platforms == platform
    return bool((bm.domain_free_gpus[mine] < bm.domain_usable_gpus[mine]).any())


def _fewest_domains_idle(fleet: Fleet, platform: int, pod_sets: tuple[tuple[int, int], ...]) -> int:
    bm = fleet.bitmap
    usable_nodes = (bm.node_usable_flags != 0) & (bm.domain_platforms[fleet.node_domain] == platform)
    gpus = np.where(usable_nodes, bm.node_gpu_counts, 0).astype(np.int64)
    n_domains = len(bm.domain_platforms)
    need = 1
    total_gpus = 0
    for count, per_pod in pod_sets:
        if count <= 0:
            continue
        total_gpus += count * per_pod
        caps = np.bincount(fleet.node_domain, weights=gpus // per_pod, minlength=n_domains)
        k = _prefix_cover(caps, count)
        if k == 0:
            return 0
        need = max(need, k)
    k = _prefix_cover(np.bincount(fleet.node_domain, weights=gpus, minlength=n_domains), total_gpus)
    return 0 if k == 0 else max(need, k)


def _prefix_cover(caps: np.ndarray, need: int) -> int:
    if need <= 0:
        return 1
    sums = np.cumsum(np.sort(caps)[::-1])
    if not len(sums) or sums[-1] < need:
        return 0
    return int(np.searchsorted(sums, need)) + 1


def parse_split_wait(annotations: Mapping[str, str] | None, *, path: str) -> tuple[float | None, float | None]:
    """(factor, max seconds) an object's annotations set, each None where unset; bad values raise ``InputError``."""
    if not annotations:
        return None, None
    factor = max_s = None
    raw = annotations.get(SPLIT_WAIT)
    if raw is not None:
        try:
            factor = float(raw.strip())
        except ValueError:
            factor = math.nan
        if not math.isfinite(factor) or not 0 <= factor <= MAX_FACTOR or raw.strip().lower().startswith("n"):
            raise InputError(
                f"{SPLIT_WAIT}: {raw!r} is not a number from 0 to {MAX_FACTOR:g} (0 turns waiting off)",
                path=f"{path}.annotations",
            )
    raw = annotations.get(SPLIT_WAIT_MAX)
    if raw is not None:
        max_s = parse_duration(raw, path=f"{path}.annotations[{SPLIT_WAIT_MAX}]")
    return factor, max_s


def nearest(chain: Iterable[Setting]) -> Setting:
    """The first factor and the first cap the chain sets (job, ClusterQueue, Cohorts: nearest first)."""
    factor = max_s = None
    for f, m in chain:
        factor = f if factor is None else factor
        max_s = m if max_s is None else max_s
    return factor, max_s


def resolve(base: SplitWait, chain: Iterable[Setting]) -> SplitWait:
    """``base`` with what the nearest object of the chain sets, key by key."""
    factor, max_s = nearest(chain)
    return replace(
        base,
        factor=base.factor if factor is None else factor,
        max_s=base.max_s if max_s is None else max_s,
    )


@dataclass(frozen=True, slots=True)
class QueueProblem:
    """A split-wait annotation of a ClusterQueue or Cohort that does not read (``error``): counted as unset."""

    kind: str  # "ClusterQueue" or "Cohort"
    name: str
    error: InputError

    @property
    def line(self) -> str:
        """What a server reports of it, placing on meanwhile (``/readyz``, the log)."""
        return f"{self.kind} {self.name}: {self.error}; ignored: the setting above it, else the flag's, applies"

    def refusal(self) -> InputError:
        """The error that refuses the file it came from (a simulation's queues: the user's own input)."""
        return InputError(f"{self.kind} {self.name}: {self.error.message}", path=self.error.path)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Per ClusterQueue, the split-wait (factor, cap in seconds) it and its Cohorts set, nearest first, None where
    none sets it; and every annotation of theirs that does not read."""

    settings: Mapping[str, Setting] = field(default_factory=dict)
    problems: tuple[QueueProblem, ...] = ()


def queue_settings(cluster_queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort]) -> QueueSettings:
    """Each ClusterQueue's settings, key by key from itself, else the nearest Cohort up its tree that sets it.

    A value that does not read counts as unset, so the queue's parent (else
    the caller's default) decides it, and is named in ``problems``: a server
    places on and reports it, a simulation refuses its input. The walk up
    stops at a Cohort no object defines, and at one seen before (a cycle).
    """
    by_name = {c.metadata.name: c for c in cohorts}
    problems: list[QueueProblem] = []
    own: dict[tuple[str, str], Setting] = {}
    for name, cohort in sorted(by_name.items()):
        own[("Cohort", name)] = _own("Cohort", name, cohort.metadata.annotations, problems)
    queues = sorted((q.metadata.name, q) for q in cluster_queues)
    for name, cq in queues:
        own[("ClusterQueue", name)] = _own("ClusterQueue", name, cq.metadata.annotations, problems)
    settings: dict[str, Setting] = {}
    for name, cq in queues:
        chain = [own[("ClusterQueue", name)]]
        parent, seen = cq.spec.parent, set()
        while parent and parent not in seen and parent in by_name:
            seen.add(parent)
            chain.append(own[("Cohort", parent)])
            parent = by_name[parent].spec.parent_cohort
        settings[name] = nearest(chain)
    return QueueSettings(settings, tuple(problems))


def _own(kind: str, name: str, annotations: Mapping[str, str], problems: list[QueueProblem]) -> Setting:
    """What one queue's annotations set, key by key; a value that does not read counts as unset."""
    factor = max_s = None
    for key in (SPLIT_WAIT, SPLIT_WAIT_MAX):
        if key not in annotations:
            continue
        try:
            f, m = parse_split_wait({key: annotations[key]}, path=f"{kind} {name}: metadata")
        except InputError as exc:
            problems.append(QueueProblem(kind, name, exc))
            continue
        factor, max_s = (f, max_s) if key == SPLIT_WAIT else (factor, m)
    return factor, max_s
