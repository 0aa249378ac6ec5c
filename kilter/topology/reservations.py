"""Reservations with backfill, at scale-up-domain granularity: when a waiting gang starts, and who may go first.

A gang waiting for its fewest domains is promised the earliest moment some
``k`` domains will hold it, judged from the running jobs' expected ends, and
the specific GPUs per node it will take then (its claim). Later gangs are
promised what is left around earlier claims. A job may start now, ahead of
them, only if no promise moves: it ends before a reservation starts, uses
slack no claim needs, or leaves its reservation's domains still able to hold
the gang (Slurm's backfill, with domains in place of nodes). Instead of a hold
that keeps a whole quota idle, only the reserved capacity waits, and only
from its start.

Pure on purpose: arrays and frozen values in and out, no clock, no I/O, so the
simulator and every server door reach the same answer from the same state.
Capacity only grows between expected ends, so the earliest start is always
``now`` or one of them; holdings never expected to end (no estimate) never
free anything, so nothing is promised on them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kilter.model.errors import InputError
from kilter.topology.fleet import Fleet
from kilter.topology.split_wait import format_instant

__all__ = [
    "Holding",
    "Holdings",
    "NodeSpace",
    "Reservation",
    "Room",
    "assign",
    "avoid_nodes",
    "blocking_reservation",
    "claimed",
    "earliest_start",
    "expected_end",
    "expected_ends",
    "node_space",
    "reason",
    "room_at",
    "window_end",
]

Ints = npt.NDArray[np.int64]


def _time(value: float, what: str) -> float:
    if math.isnan(value):
        raise InputError(f"{what} must be a number, not NaN")
    return float(value)


def expected_end(start_s: float, estimate_s: float | None, now_s: float) -> float:
    """When a running job is expected to end: ``start + estimate`` until it gets there, then as long again as it has
    run (``now + (now - start)``), ``inf`` without an estimate.

    Runtimes are heavy-tailed: a job that outlived its estimate says the estimate
    was wrong, not that it is about to end. With nothing else known, the job is
    as likely past the middle of its life as before it (the Lindy/Copernican
    argument), so the median of what remains is its age; no tuned constant.
    """
    start, now = _time(start_s, "a job's start"), _time(now_s, "now")
    if estimate_s is None:
        return math.inf
    if _time(estimate_s, "a runtime estimate") < 0:
        raise InputError(f"a runtime estimate must be >= 0 seconds, not {estimate_s}")
    return float(expected_ends(np.asarray([start]), np.asarray([float(estimate_s)]), now)[0])


def expected_ends(
    start_s: npt.NDArray[np.float64], estimate_s: npt.NDArray[np.float64], now_s: float
) -> npt.NDArray[np.float64]:
    """``expected_end`` of many running jobs at once (an estimate of ``inf``: none), for a caller that keeps them
    as arrays (the simulator, every busy node)."""
    due = start_s + estimate_s
    ends = np.where(due > now_s, due, now_s + np.maximum(now_s - start_s, 0.0))
    out: npt.NDArray[np.float64] = np.where(np.isinf(estimate_s), math.inf, ends).astype(np.float64)
    return out


@dataclass(frozen=True, slots=True)
class Holding:
    """GPUs a running job holds, per node, and when it is expected to free them (``expected_end``)."""

    nodes: tuple[int, ...]
    gpus: tuple[int, ...]
    expected_end_s: float


@dataclass(frozen=True, slots=True)
class Holdings:
    """Every holding as flat rows (node, GPUs, expected end): thousands of jobs released by one ``bincount``."""

    node: Ints
    gpus: Ints
    end_s: npt.NDArray[np.float64]

    def __post_init__(self) -> None:
        if not len(self.node) == len(self.gpus) == len(self.end_s):
            raise InputError("holdings need one node, GPU count and expected end per row")
        if len(self.gpus) and int(self.gpus.min()) < 0:
            raise InputError("a holding cannot hold a negative number of GPUs")
        if np.isnan(self.end_s).any():
            raise InputError("a holding's expected end must be a number, not NaN")

    @classmethod
    def of(cls, holdings: Iterable[Holding]) -> Holdings:
        hs = list(holdings)
        if any(len(h.nodes) != len(h.gpus) for h in hs):
            raise InputError("a holding needs one GPU count per node")
        node = np.fromiter(itertools.chain.from_iterable(h.nodes for h in hs), np.int64)
        gpus = np.fromiter(itertools.chain.from_iterable(h.gpus for h in hs), np.int64)
        end = np.repeat(np.asarray([h.expected_end_s for h in hs], np.float64), [len(h.nodes) for h in hs])
        return cls(node, gpus, end)

    def released(self, n_nodes: int, now_s: float, t: float) -> Ints:
        """GPUs freed per node by ``t`` (from ``now_s`` on: an end already past counts as ``now_s``)."""
        done = self.end_s <= max(t, now_s)
        return np.bincount(self.node[done], weights=self.gpus[done], minlength=n_nodes).astype(np.int64)


@dataclass(frozen=True, slots=True)
class NodeSpace:
    """The nodes a gang may use: each node's domain, usable GPUs (0 where unusable or off its platform) and free
    GPUs now."""

    node_domain: Ints
    capacity: Ints
    free: Ints
    n_domains: int

    def __post_init__(self) -> None:
        if not len(self.node_domain) == len(self.capacity) == len(self.free):
            raise InputError("a node space needs one domain, capacity and free count per node")
        if len(self.free) and (int(self.capacity.min()) < 0 or int(self.free.min()) < 0):
            raise InputError("node GPU capacity and free GPUs must be >= 0")
        if (self.free > self.capacity).any():
            raise InputError("a node cannot have more free GPUs than it has usable ones")

    def free_at(self, holdings: Holdings, now_s: float, t: float) -> Ints:
        free: Ints = np.minimum(self.free + holdings.released(len(self.free), now_s, t), self.capacity)
        return free

    def nodes_of(self, domains: Iterable[int]) -> Ints:
        found: Ints = np.flatnonzero(np.isin(self.node_domain, np.fromiter(domains, np.int64))).astype(np.int64)
        return found


def node_space(fleet: Fleet, platform: int | None = None) -> NodeSpace:
    """The space read off a fleet: usable nodes (of ``platform``, when given) at their GPU counts, free as booked."""
    bm = fleet.bitmap
    usable = bm.node_usable_flags != 0
    if platform is not None:
        usable &= bm.domain_platforms[fleet.node_domain] == platform
    capacity = np.where(usable, bm.node_gpu_counts, 0).astype(np.int64)
    free = np.clip(capacity - bm.node_used_gpus, 0, None).astype(np.int64)
    return NodeSpace(fleet.node_domain.astype(np.int64), capacity, free, len(bm.domain_platforms))


@dataclass(frozen=True, slots=True)
class Reservation:
    """A promise: ``owner``'s gang starts at ``start_s`` in ``domains`` (``pods`` per domain), taking ``gpus`` on
    ``nodes`` (its claim) until ``expected_end_s`` (``inf`` without an estimate)."""

    owner: str
    start_s: float
    expected_end_s: float
    domains: tuple[int, ...]
    pods: tuple[int, ...]
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]
    pod_sets: tuple[tuple[int, int], ...]

    def overlaps(self, start_s: float, end_s: float) -> bool:
        """Whether the window ``[start_s, end_s)`` meets this one; an empty window is its first instant."""
        return self.start_s < window_end(start_s, end_s) and window_end(self.start_s, self.expected_end_s) > start_s


def window_end(start_s: float, end_s: float) -> float:
    """The end of the window ``[start_s, end_s)``; an empty one is its first instant (so it still meets what
    starts then)."""
    return end_s if end_s > start_s else math.nextafter(start_s, math.inf)


def _pod_sets(pod_sets: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Pod sets with pods, largest pods first: the order whole pods pack best in."""
    out = []
    for count, per_pod in pod_sets:
        if count < 0 or per_pod < 0 or (count and not per_pod):
            raise InputError(f"a pod set needs >= 0 pods of >= 1 GPU each, not {count} of {per_pod}")
        if count:
            out.append((int(count), int(per_pod)))
    if not out:
        raise InputError("a gang needs at least one pod")
    return tuple(sorted(out, key=lambda s: -s[1]))


def claimed(reservations: Iterable[Reservation], n_nodes: int, start_s: float, end_s: float) -> Ints:
    """GPUs per node claimed by the reservations whose window meets ``[start_s, end_s)``."""
    claim = np.zeros(n_nodes, np.int64)
    for r in reservations:
        if r.overlaps(start_s, end_s):
            np.add.at(claim, np.asarray(r.nodes, np.int64), np.asarray(r.gpus, np.int64))
    return claim


def assign(avail: Ints, nodes: Ints, sets: Sequence[tuple[int, int]]) -> tuple[Ints, Ints] | None:
    """(GPUs, pods) per node of ``nodes`` holding every pod, or None: each set, largest pods first, fills the
    tightest nodes first. Exact for one pod set, for whole-node pods plus a remainder and for pod sizes that divide
    each other (the shapes jobs take); a heuristic for other mixes."""
    left = avail[nodes].copy()
    gpus, pods = np.zeros_like(left), np.zeros_like(left)
    for count, per_pod in sets:
        fits = left // per_pod
        order = np.argsort(left, kind="stable")
        cum = np.cumsum(fits[order])
        if not len(cum) or cum[-1] < count:
            return None
        last = int(np.searchsorted(cum, count))
        take = fits[order].copy()
        take[last + 1 :] = 0
        take[last] -= cum[last] - count
        placed = np.zeros_like(left)
        placed[order] = take
        left -= placed * per_pod
        gpus += placed * per_pod
        pods += placed
    return gpus, pods


def _cover(caps: npt.NDArray[Any], need: int) -> int:
    sums = np.cumsum(np.sort(caps)[::-1])
    return 0 if not len(sums) or sums[-1] < need else int(np.searchsorted(sums, need)) + 1


Fit = tuple[Ints, Ints, Ints, Ints]
"""Domains, their nodes, and per node the GPUs and pods it gives the gang."""


def _bound(space: NodeSpace, avail: Ints, sets: Sequence[tuple[int, int]]) -> tuple[int, list[Any], Any]:
    """The fewest domains that could hold the gang, each pod set alone and its GPUs in all (0: none could), with
    the per-domain pods of each set and GPUs: exact for one pod set."""
    nd, n = space.node_domain, space.n_domains
    caps = [np.bincount(nd, weights=avail // g, minlength=n) for _, g in sets]
    total = np.bincount(nd, weights=avail, minlength=n)
    covers = [_cover(c, count) for c, (count, _) in zip(caps, sets, strict=True)]
    covers.append(_cover(total, sum(c * g for c, g in sets)))
    return (0 if min(covers) == 0 else max(covers)), caps, total


def _fit(space: NodeSpace, avail: Ints, sets: Sequence[tuple[int, int]], k: int) -> Fit | None:
    """(domains, nodes, GPUs, pods) of the fewest domains, at most ``k``, that hold the gang; ties to the tightest, then
    the lowest index: the largest domains, then the smallest one that completes them."""
    n = space.n_domains
    fewest, caps, total = _bound(space, avail, sets)
    if not 0 < fewest <= k:
        return None
    index = np.arange(n)
    order = np.lexsort((index, -total, *[-c for c in reversed(caps)]))
    order = order[total[order] > 0]
    tightest = np.lexsort((index, total, *reversed(caps)))
    for j in range(fewest, min(k, len(order)) + 1):
        head = [int(d) for d in order[: j - 1]]
        enough = np.ones(n, bool)  # what the last domain must add, each pod set alone and the GPUs in all
        for c, (count, _) in zip([*caps, total], [*sets, (sum(c * g for c, g in sets), 1)], strict=True):
            enough &= c[head].sum() + c >= count
        enough[head] = False
        for last in tightest[enough[tightest]]:
            found = _try(space, avail, sets, [*head, int(last)])
            if found is not None:
                return found
    return None


def _try(space: NodeSpace, avail: Ints, sets: Sequence[tuple[int, int]], domains: list[int]) -> Fit | None:
    nodes = space.nodes_of(domains)
    got = assign(avail, nodes, sets)
    return None if got is None else (np.asarray(sorted(domains), np.int64), nodes, *got)


def earliest_start(
    owner: str,
    pod_sets: Iterable[tuple[int, int]],
    k: int,
    space: NodeSpace,
    holdings: Holdings,
    reservations: Sequence[Reservation],
    now_s: float,
    runtime_s: float | None,
) -> Reservation | None:
    """The earliest moment, ``now`` or an expected end, at which at most ``k`` domains hold every pod of the gang
    (whole pods per node) once the holdings ended by then have freed theirs and the earlier ``reservations`` whose
    window meets ``[t, t + runtime_s)`` have taken their claims; None when that never comes."""
    now = _time(now_s, "now")
    if k < 1:
        raise InputError(f"a gang is allowed at least 1 domain, not {k}")
    runtime = math.inf if runtime_s is None else _time(runtime_s, "a runtime estimate")
    if runtime < 0:
        raise InputError(f"a runtime estimate must be >= 0 seconds, not {runtime_s}")
    sets = _pod_sets(pod_sets)
    n, ends = len(space.free), holdings.end_s  # an end already past frees at ``now``, the first start tried
    order = np.argsort(ends, kind="stable")
    row_end, row_node, row_gpus = ends[order], holdings.node[order], holdings.gpus[order]
    times = np.unique(np.concatenate(([now], row_end, [r.expected_end_s for r in reservations])))
    times = times[np.isfinite(times) & (times >= now)]
    # which earlier reservations each start's window meets; along a run of starts meeting the same ones the
    # claims stay put while holdings only free GPUs, so whether the gang fits changes once per run at most
    stops_at = times + runtime  # each start's own window, as ``window_end`` ends it
    stops_at = np.where(stops_at > times, stops_at, np.nextafter(times, math.inf))
    starts = np.asarray([r.start_s for r in reservations], np.float64)
    stops = np.asarray([window_end(r.start_s, r.expected_end_s) for r in reservations], np.float64)
    meets = (starts[None, :] < stops_at[:, None]) & (stops[None, :] > times[:, None])
    claims = np.zeros((len(reservations), n), np.int64)
    for i, r in enumerate(reservations):
        np.add.at(claims[i], np.asarray(r.nodes, np.int64), np.asarray(r.gpus, np.int64))
    cuts = np.flatnonzero(np.any(meets[1:] != meets[:-1], axis=1)) + 1
    bounds = [0, *cuts.tolist(), len(times)]

    def avail_at(e: int, claim: Ints) -> Ints:
        done = int(np.searchsorted(row_end, times[e], side="right"))
        freed = np.bincount(row_node[:done], weights=row_gpus[:done], minlength=n).astype(np.int64)
        free = np.minimum(space.free + freed, space.capacity)
        avail: Ints = np.clip(free - claim, 0, None)
        return avail

    def fits(e: int, claim: Ints) -> bool:  # for one pod set the bound is exact, and cheaper than choosing the domains
        if len(sets) == 1:
            return 0 < _bound(space, avail_at(e, claim), sets)[0] <= k
        return _fit(space, avail_at(e, claim), sets, k) is not None

    claim = np.zeros(n, np.int64)  # what the reservations meeting the current run's starts claim, kept run to run
    meeting = np.zeros(len(reservations), bool)
    for lo, hi in itertools.pairwise(bounds):
        for i in np.flatnonzero(meets[hi - 1] != meeting).tolist():
            claim += claims[i] if meets[hi - 1, i] else -claims[i]
        meeting = meets[hi - 1]
        if not fits(hi - 1, claim):
            continue
        while lo < hi - 1:  # the first start of the run that fits; hi - 1 fits
            mid = (lo + hi - 1) // 2
            lo, hi = (lo, mid + 1) if fits(mid, claim) else (mid + 1, hi)
        found = _fit(space, avail_at(hi - 1, claim), sets, k)
        assert found is not None  # fits(hi - 1)
        t = float(times[hi - 1])
        domains, nodes, gpus, pods = found
        used = gpus > 0
        per_domain = np.bincount(space.node_domain[nodes], weights=pods, minlength=space.n_domains)
        return Reservation(
            owner,
            t,
            t + runtime,
            tuple(domains.tolist()),
            tuple(int(per_domain[d]) for d in domains),
            tuple(nodes[used].tolist()),
            tuple(gpus[used].tolist()),
            sets,
        )
    return None


def blocking_reservation(
    nodes: Sequence[int] | Ints,
    gpus: Sequence[int] | Ints,
    expected_end_s: float,
    space: NodeSpace,
    holdings: Holdings,
    reservations: Sequence[Reservation],
    now_s: float,
    owner: str | None = None,
) -> Reservation | None:
    """The first reservation (by start) a job taking ``gpus`` on ``nodes`` now would delay, or None.

    A reservation is safe when the job is expected to end by its start, stays
    out of its domains, or, at its start with the job still running, fits in
    the slack left after every claim overlapping it; failing that, when its
    gang still fits in its domains around the job and every other claim, and
    no other reservation overlapping it shares those domains (so moving its
    pods there cannot crowd another's). ``owner``'s own reservations never
    block it.
    """
    now, end = _time(now_s, "now"), _time(expected_end_s, "a job's expected end")
    node, take = np.asarray(nodes, np.int64), np.asarray(gpus, np.int64)
    if len(node) != len(take) or (len(take) and int(take.min()) < 0):
        raise InputError("a job needs one GPU count >= 0 per node it takes")
    n = len(space.free)
    job = np.bincount(node, weights=take, minlength=n).astype(np.int64)
    touched = set(space.node_domain[job > 0].tolist())
    for r in sorted(reservations, key=lambda r: (r.start_s, r.owner)):
        if r.owner == owner or end <= r.start_s or touched.isdisjoint(r.domains):
            continue
        room = room_at(r, reservations, space, holdings, now)
        mine = space.nodes_of(r.domains)
        if ((room.slack - job)[mine][job[mine] > 0] >= 0).all():
            continue
        if not room.shared and assign(np.clip(room.around - job, 0, None), mine, r.pod_sets) is not None:
            continue
        return r
    return None


@dataclass(frozen=True, slots=True)
class Room:
    """A reservation's room at its start: free GPUs per node after every other claim overlapping its window
    (``around``), less its own claim too (``slack``), and whether another such claim ``shared`` its domains."""

    around: Ints
    slack: Ints
    shared: bool


def room_at(
    r: Reservation, reservations: Sequence[Reservation], space: NodeSpace, holdings: Holdings, now_s: float
) -> Room:
    """``r``'s room at its start, among ``reservations`` (``blocking_reservation`` asks it of every one it meets)."""
    n = len(space.free)
    window = (r.start_s, r.expected_end_s)
    others = [o for o in reservations if o is not r and o.overlaps(*window)]
    around = space.free_at(holdings, now_s, r.start_s) - claimed(others, n, *window)
    shared = any(not set(o.domains).isdisjoint(r.domains) for o in others)
    return Room(around, around - claimed([r], n, *window), shared)


def avoid_nodes(
    space: NodeSpace, reservations: Iterable[Reservation], expected_end_s: float, owner: str | None = None
) -> npt.NDArray[np.bool_]:
    """Per node, whether it lies in a domain reserved, by someone other than ``owner``, from before a job ending at
    ``expected_end_s`` would be gone: where a planner should look last (``blocking_reservation`` still decides)."""
    end = _time(expected_end_s, "a job's expected end")
    domains = {d for r in reservations if r.owner != owner and r.start_s < end for d in r.domains}
    return np.isin(space.node_domain, np.fromiter(domains, np.int64, len(domains)))


def reason(reservation: Reservation, domain_name: Callable[[int], str] | Sequence[str]) -> str:
    """``rack r07 is reserved for ml/llama-405b from 2026-12-07T14:20:00Z``: the same words at every door."""
    name = domain_name if callable(domain_name) else domain_name.__getitem__
    names = [name(d) for d in reservation.domains]
    who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    verb = "is" if len(names) == 1 else "are"
    return f"{who} {verb} reserved for {reservation.owner} from {format_instant(reservation.start_s)}"
