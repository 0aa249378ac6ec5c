"""What one region tells the others: room per scale-up domain and quota headroom, stamped (origin, generation).

Small on purpose: a peer ranks regions for a waiting job from it (can the
gang fit there now, in how few domains, with quota to spare), and the worker
region's own kilter and Kueue still decide the admission. So it carries, per
domain, only the platform, the free GPUs and the largest gang shape it takes
now (``gangs.inventory``: whole nodes first), and per ClusterQueue the GPUs
it could still admit. ``generation`` grows with every change the origin
publishes; ``produced_at`` (the origin's clock, Unix seconds) is what peers
age it by. ``seal`` is the inventory as its origin wrote and signed it
(``authorship``), kept so that a relay forwards those very bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kilter.gangs.inventory import Inventory
from kilter.model.errors import InputError
from kilter.topology.regions import DomainRoom, RegionView, fewest_domains

__all__ = ["DomainRoom", "RegionInventory", "Seal", "fewest_domains", "of_inventory"]  # 1st, 4th re-exported


@dataclass(frozen=True)
class Seal:
    """An inventory as its origin wrote it: the serialized ``kilter.v1.RegionInventory`` and the origin's signature
    over it, with the certificate chain to check that by. An empty signature: a pool without TLS."""

    body: bytes
    signature: bytes = b""
    certificates: tuple[bytes, ...] = ()  # DER, the origin's certificate first


@dataclass(frozen=True)
class RegionInventory:
    """A region's inventory as its own kilter published it; ``origin`` is the region's name."""

    origin: str
    generation: int
    produced_at: float
    domains: tuple[DomainRoom, ...] = ()
    headroom: Mapping[str, int] = field(default_factory=dict)  # ClusterQueue -> GPUs it could still admit
    local_queues: Mapping[str, str] = field(default_factory=dict)  # LocalQueue NAMESPACE/NAME -> its ClusterQueue
    seal: Seal | None = field(default=None, compare=False, repr=False)  # None: not yet sealed (``authorship``)

    def __post_init__(self) -> None:
        if not self.origin:
            raise InputError("an inventory names its origin region")
        if self.generation < 0:
            raise InputError(f"inventory of {self.origin}: generation must not be negative")

    def newer_than(self, other: RegionInventory | None) -> bool:
        """Whether this replaces ``other`` (the same origin's): a higher generation only. An equal generation with
        other content cannot come from an honest origin, and the first one heard stays."""
        return other is None or self.generation > other.generation

    def view(self, now: float) -> RegionView:
        """What ``topology.regions`` ranks: the rooms, and headroom keyed by LocalQueue (NAMESPACE/NAME), the name a
        MultiKueue copy keeps in every worker, through the ClusterQueue it points to there."""
        headroom = {lq: self.headroom[cq] for lq, cq in self.local_queues.items() if cq in self.headroom}
        return RegionView(self.origin, self.domains, headroom, max(0.0, now - self.produced_at))


def of_inventory(
    origin: str,
    generation: int,
    produced_at: float,
    inventory: Inventory,
    headroom: Mapping[str, int] | None = None,
    local_queues: Mapping[str, str] | None = None,
) -> RegionInventory:
    """The summary of a region's ``gangs.inventory`` answer to publish; detached nodes (a multi-node platform's
    node without its domain label) are left out, as they take only single-pod gangs."""
    rooms = tuple(
        DomainRoom(d.platform, d.gpus_free, d.largest_pods, d.largest_gpus_per_pod)
        for d in inventory.domains
        if not d.detached
    )
    return RegionInventory(origin, generation, produced_at, rooms, dict(headroom or {}), dict(local_queues or {}))
