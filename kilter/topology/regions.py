"""Which regions to send a waiting gang to: the few where it fits now in the fewest scale-up domains.

One region sees the others only through what they publish: per scale-up
domain the platform, the free GPUs and the largest gang shape it takes now
(``DomainRoom``), and per ClusterQueue the GPUs it could still admit. From
that, ``rank`` orders the regions a gang may go to, and ``nominate`` picks
the ones to send it to. The live dispatcher (``kilter.pool.dispatch``) and
the simulator (``kilter.sim.regions``) both call these, so what the
simulator reports is what the dispatcher does.

The order, each rule a reason rather than a weight:

1. *It fits there now, with quota.* A region that cannot hold the gang now
   is not sent it: its copy would only queue there, and a gang admitted
   where it waits is not admitted where it could run.
2. *The fewest domains.* The mission: a gang split over fewer NVLink/xGMI
   domains runs faster, and fewer splits leave whole domains for others.
3. *Its data, or its home.* Data locality (``kilter.dev/data-region``),
   else the gang's own region: no cross-region traffic for a tie.
4. *Its stated preference* (the order of ``kilter.dev/regions``).
5. *Best fit.* The fewest pods of room left in the domains it would use:
   the tightest hole, so the large rooms stay for the gangs that need them.
6. *The freshest inventory*, whole seconds (the least likely to be stale),
   then the name, so equal regions are ranked the same way everywhere.

``nominate`` sends the gang to the regions tied with the best on the rules
that are about the gang's placement (fits, domains, locality), at most
``NOMINATE_AT_MOST``: a second or third copy saves a round when the best
region's room is taken meanwhile (its inventory is seconds old), and the
worker that admits first wins. A region ranked worse on domains is never
nominated beside a better one, since it might admit first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "NOMINATE_AT_MOST",
    "Choice",
    "DomainRoom",
    "GangAsk",
    "RegionView",
    "book",
    "fewest_domains",
    "nominate",
    "rank",
]

NOMINATE_AT_MOST = 3
"""Copies of one waiting gang at a time: enough to ride out one stale inventory, few enough that workers do not
each hold a queued copy of every job (Kueue allows 20)."""


@dataclass(frozen=True)
class DomainRoom:
    """One scale-up domain's room now: free GPUs, and the most pods of one size it takes (whole nodes first)."""

    platform: str
    gpus_free: int
    largest_pods: int
    largest_gpus_per_pod: int

    def pods_of(self, gpus_per_pod: int) -> int:
        """Pods of ``gpus_per_pod`` this domain takes now: exact for its largest shape's size; for others, what its
        free GPUs allow (an upper bound: a peer ranks with it, the region itself decides)."""
        if gpus_per_pod <= 0:
            return 0
        if gpus_per_pod == self.largest_gpus_per_pod:
            return self.largest_pods
        if gpus_per_pod > self.largest_gpus_per_pod:
            return 0
        return self.gpus_free // gpus_per_pod


def _used(rooms: Iterable[DomainRoom], platform: str, pods: int, gpus_per_pod: int) -> tuple[int, int] | None:
    """(domains, pods of room left in them) of the largest-rooms-first fill; None when all together fall short."""
    if pods <= 0:
        return 0, 0
    room = sorted((r.pods_of(gpus_per_pod) for r in rooms if r.platform == platform), reverse=True)
    held = 0
    for used, pods_here in enumerate(room, start=1):
        if pods_here <= 0:
            break
        held += pods_here
        if held >= pods:
            return used, held - pods
    return None


def _mixed(rooms: Sequence[DomainRoom], platform: str, ask: GangAsk) -> tuple[int, int] | None:
    """(domains, room left) for a gang whose smaller pods add ``other_gpus``: enough domains for its largest pods
    (in pods of that size) and for all its GPUs (in free GPUs), each the fewest largest-first. Both are needed, so
    the larger count is a lower bound on what the region needs (the region itself decides); exact for one pod
    size, where the GPU count never needs more domains than the pods do. Room left is counted in GPUs then."""
    big = _used(rooms, platform, ask.pods, ask.gpus_per_pod)
    if ask.other_gpus == 0 or big is None:
        return big
    free = sorted((r.gpus_free for r in rooms if r.platform == platform), reverse=True)
    held, need = 0, ask.gpus
    for used, gpus in enumerate(free, start=1):
        held += gpus
        if held >= need:
            domains = max(big[0], used)
            return domains, sum(free[:domains]) - need
    return None


def fewest_domains(rooms: Iterable[DomainRoom], platform: str, pods: int, gpus_per_pod: int) -> int | None:
    """The fewest domains of ``platform`` that take ``pods`` pods of ``gpus_per_pod`` GPUs now (largest rooms
    first: optimal, since any k domains hold at most the k largest rooms' pods); None when all together do not."""
    used = _used(rooms, platform, pods, gpus_per_pod)
    return None if used is None else used[0]


@dataclass(frozen=True)
class GangAsk:
    """A waiting gang as the dispatcher sees it: its shape, its queue, where it comes from and may go."""

    platforms: tuple[str, ...]  # the catalog platforms its pods may run on (one, for most jobs)
    pods: int  # its pods of the largest size
    gpus_per_pod: int  # that size
    home: str  # the region whose users' job it is
    queue: str = ""  # the queue its quota is checked in, as views key headroom; "" for none
    allowed: tuple[str, ...] = ()  # kilter.dev/regions, in preference order; () for any
    avoided: frozenset[str] = frozenset()  # kilter.dev/avoid-regions
    data_region: str = ""  # kilter.dev/data-region; "" for the home region
    other_gpus: int = 0  # the GPUs of its smaller pods (a launcher beside whole-node workers)

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod + self.other_gpus

    @classmethod
    def of_pod_sets(cls, pod_sets: Iterable[tuple[int, int]], **fields: Any) -> GangAsk:
        """The ask of a gang of ``(pods, GPUs per pod)`` sets: its largest pods as the shape, the rest as GPUs."""
        sets = [(n, g) for n, g in pod_sets if n > 0 and g > 0]
        size = max((g for _, g in sets), default=0)
        big = sum(n for n, g in sets if g == size)
        return cls(pods=big, gpus_per_pod=size, other_gpus=sum(n * g for n, g in sets if g != size), **fields)


@dataclass(frozen=True)
class RegionView:
    """What is known of one region now: its domains' room, its quota headroom, how old that news is."""

    name: str
    rooms: Sequence[DomainRoom] = ()
    headroom: Mapping[str, int] = field(default_factory=dict)  # queue -> GPUs it could still admit
    age_s: float = 0.0


@dataclass(frozen=True)
class Choice:
    """A region the gang fits in now, with what ranked it."""

    region: str
    domains: int
    local: bool
    preference: int
    leftover: int  # room left in the domains it would use: pods of its size (GPUs for a gang of mixed sizes)
    age_s: float

    def key(self) -> tuple[int, bool, int, int, int, str]:
        return self.domains, not self.local, self.preference, self.leftover, int(self.age_s), self.region

    def placement_key(self) -> tuple[int, bool]:
        """What a tie among nominations must share: how well the gang is placed, not how the tie was broken."""
        return self.domains, not self.local


def _quota_allows(ask: GangAsk, view: RegionView) -> bool:
    """A queue the region publishes no headroom for is not served there: Kueue would not admit the copy."""
    if not ask.queue:
        return True
    return view.headroom.get(ask.queue, -1) >= ask.gpus


def rank(ask: GangAsk, views: Iterable[RegionView]) -> list[Choice]:
    """The regions ``ask`` may go to and fits in now, best first (the module's order)."""
    local_region = ask.data_region or ask.home
    choices = []
    for view in views:
        if view.name in ask.avoided or (ask.allowed and view.name not in ask.allowed):
            continue
        if not _quota_allows(ask, view):
            continue
        fits = [u for p in ask.platforms if (u := _mixed(view.rooms, p, ask)) is not None]
        if not fits:
            continue
        used = min(fits)
        preference = ask.allowed.index(view.name) if ask.allowed else 0
        choices.append(Choice(view.name, used[0], view.name == local_region, preference, used[1], view.age_s))
    return sorted(choices, key=Choice.key)


def book(view: RegionView, ask: GangAsk) -> RegionView:
    """``view`` with ``ask`` taken out of its room, largest rooms first as ``rank`` fills them: what the next
    gang of the same dispatch round is ranked on, so two gangs are not both sent to one hole. (Its quota
    headroom is left: the region's Kueue charges it, and the next inventory says so.)"""
    fits = [(u, p) for p in ask.platforms if (u := _mixed(view.rooms, p, ask)) is not None]
    if not fits:
        return view
    platform = min(fits)[1]  # the platform ``rank`` placed it on
    order = sorted(
        (i for i, r in enumerate(view.rooms) if r.platform == platform),
        key=lambda i: view.rooms[i].pods_of(ask.gpus_per_pod),
        reverse=True,
    )
    rooms = list(view.rooms)
    pods, other = ask.pods, ask.other_gpus
    for i in order:
        if pods <= 0 and other <= 0:
            break
        r = rooms[i]
        taken = min(pods, r.pods_of(ask.gpus_per_pod))
        left = r.gpus_free - taken * ask.gpus_per_pod
        small = min(other, left)
        largest = r.largest_pods - taken if r.largest_gpus_per_pod == ask.gpus_per_pod else r.largest_pods
        if r.largest_gpus_per_pod > 0:  # no more of its largest shape than the GPUs left can hold
            largest = min(largest, (left - small) // r.largest_gpus_per_pod)
        rooms[i] = DomainRoom(r.platform, left - small, max(0, largest), r.largest_gpus_per_pod)
        pods, other = pods - taken, other - small
    return RegionView(view.name, tuple(rooms), view.headroom, view.age_s)


def nominate(ask: GangAsk, views: Iterable[RegionView], *, at_most: int = NOMINATE_AT_MOST) -> list[str]:
    """The regions to send ``ask`` to now, best first: those placing it as well as the best does, at most
    ``at_most``; [] when it fits nowhere now (it waits at home, and is ranked again next round)."""
    ranked = rank(ask, views)
    if not ranked:
        return []
    best = ranked[0].placement_key()
    return [c.region for c in ranked if c.placement_key() == best][:at_most]
