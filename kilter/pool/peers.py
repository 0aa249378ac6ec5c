"""Keeping the latest inventory of every region without a leader: newest generation wins, relayed, aged out.

Each region is the only author of its own inventory and bumps its
generation with every change; the exchange offers a table only inventories
their origin sealed (``authorship``), so no peer can write one for another. A peer keeps, per origin, the inventory with
the highest generation it has heard, from the origin itself or relayed by
anyone, so a region whose direct link is down is still heard through a
third. Exchanges are pull by digest: a peer sends what it holds as
``{origin: generation}`` and gets back exactly the inventories it lacks or
holds older; both sides then hold the newer of each. Merging is a join
(per origin, the maximum generation): commutative, associative and
idempotent, so any order of exchanges over any connected graph ends with
every peer holding the same table, and losing messages only delays it.

An inventory is *fresh* while ``now - produced_at`` is under ``ttl_s``: a
region that is partitioned away, or dead, stops publishing, its last
inventory ages out everywhere, and no job is dispatched on what it said. No
quorum is ever needed: every region decides for its own jobs from its own
fresh table. (``produced_at`` is the origin's clock; regions' clocks are
assumed within a fraction of ``ttl_s`` of each other, as NTP keeps them.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kilter.pool.inventory import RegionInventory

__all__ = ["DEFAULT_TTL_S", "Digest", "PeerTable"]

DEFAULT_TTL_S = 30.0
"""A region unheard for this long is not dispatched to: several exchange rounds (a second or two each) must
fail in a row first, and a job waits at most this long for its region to be given up on."""

Digest = Mapping[str, int]  # origin -> the generation held


@dataclass
class PeerTable:
    """One region's table of every region's latest inventory, its own included."""

    region: str
    ttl_s: float = DEFAULT_TTL_S
    members: frozenset[str] | None = None  # the pool's regions; None: any origin is taken
    held: dict[str, RegionInventory] = field(default_factory=dict)
    accepted: int = 0  # inventories that replaced an older one (or were new): what an exchange moved
    ignored: int = 0  # inventories no newer than what was held
    strangers: int = 0  # inventories of regions the pool does not name, dropped
    future: int = 0  # inventories stamped later than any honest clock could, dropped
    own_heard: int = -1  # the highest generation of this region's own inventory that peers still hold

    def publish(self, inventory: RegionInventory) -> None:
        """This region's own new inventory; only this region may author it."""
        if inventory.origin != self.region:
            raise ValueError(f"region {self.region} cannot publish the inventory of {inventory.origin}")
        if not inventory.newer_than(self.held.get(self.region)):
            raise ValueError(f"region {self.region} already published generation {self.held[self.region].generation}")
        self.held[self.region] = inventory
        self.accepted += 1

    def next_generation(self, now: float) -> int:
        """The generation of this region's next inventory: its clock in milliseconds, so a restarted region goes
        on above what it published before without remembering it, and above anything of its own peers still
        hold (a clock set back, or a restart within a millisecond)."""
        held = self.held.get(self.region)
        return max(int(now * 1000), self.own_heard + 1, (held.generation + 1) if held is not None else 0)

    def from_the_future(self, inv: RegionInventory, now: float) -> bool:
        """Stamped later than its origin's clock could be (clocks agree within ``ttl_s``): a generation is that
        clock in milliseconds, so one far above ``now`` would hold the origin's real inventories out for good."""
        horizon = now + self.ttl_s
        return inv.produced_at > horizon or inv.generation > horizon * 1000

    def offer(self, inventories: Iterable[RegionInventory], now: float | None = None) -> list[RegionInventory]:
        """Take each inventory newer than the one held of its origin; the ones taken (to relay onwards). This
        region's own comes only from ``publish``: a peer's copy of it is old news (noted in ``own_heard``; the
        exchange passes on only copies this region's own key sealed), an origin outside ``members`` is dropped,
        and with ``now`` so is an inventory from the future."""
        taken = []
        for inv in inventories:
            if now is not None and self.from_the_future(inv, now):
                self.future += 1
            elif inv.origin == self.region:
                self.own_heard = max(self.own_heard, inv.generation)
                self.ignored += 1
            elif self.members is not None and inv.origin not in self.members:
                self.strangers += 1
            elif inv.newer_than(self.held.get(inv.origin)):
                self.held[inv.origin] = inv
                self.accepted += 1
                taken.append(inv)
            else:
                self.ignored += 1
        return taken

    def heard(self) -> dict[str, int]:
        """The highest generation known of each origin: what ``offer`` would take only above. For this region,
        also what its peers hold of it (``own_heard``)."""
        out = self.digest()
        out[self.region] = max(out.get(self.region, -1), self.own_heard)
        return out

    def digest(self) -> dict[str, int]:
        """What this peer holds, by origin: all a peer needs to answer with what this one lacks."""
        return {origin: inv.generation for origin, inv in self.held.items()}

    def newer_than(self, digest: Digest) -> list[RegionInventory]:
        """The inventories a peer whose digest is ``digest`` lacks or holds older."""
        return [inv for origin, inv in sorted(self.held.items()) if inv.generation > digest.get(origin, -1)]

    def exchange(self, other: PeerTable) -> int:
        """One pull each way over a link (what the gRPC exchange carries): how many inventories moved."""
        to_other = self.newer_than(other.digest())
        to_self = other.newer_than(self.digest())
        return len(other.offer(to_other)) + len(self.offer(to_self))

    def fresh(self, now: float) -> dict[str, RegionInventory]:
        """The inventories to decide on now: this region's own, and each other one produced less than ``ttl_s``
        from ``now`` either way (an origin whose clock runs a little ahead is not cut off for it)."""
        return {o: inv for o, inv in self.held.items() if o == self.region or abs(now - inv.produced_at) < self.ttl_s}
