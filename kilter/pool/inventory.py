"""What one region tells the others: room per scale-up domain and quota headroom, stamped (origin, generation).

Small on purpose: a peer ranks regions for a waiting job from it (can the
gang fit there now, in how few domains, with quota to spare), and the worker
region's own kilter and Kueue still decide the admission. So it carries, per
domain, only the platform, the free GPUs and the largest gang shape it takes
now (``gangs.inventory``: whole nodes first), and per ClusterQueue the GPUs
it could still admit. ``generation`` grows with every change the origin
publishes; ``produced_at`` (the origin's clock, Unix seconds) is what peers
age it by.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kilter.gangs.inventory import Inventory
from kilter.model.errors import InputError

__all__ = ["DomainRoom", "RegionInventory", "fewest_domains", "of_inventory"]


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


@dataclass(frozen=True)
class RegionInventory:
    """A region's inventory as its own kilter published it; ``origin`` is the region's name."""

    origin: str
    generation: int
    produced_at: float
    domains: tuple[DomainRoom, ...] = ()
    headroom: Mapping[str, int] = field(default_factory=dict)  # ClusterQueue -> GPUs it could still admit

    def __post_init__(self) -> None:
        if not self.origin:
            raise InputError("an inventory names its origin region")
        if self.generation < 0:
            raise InputError(f"inventory of {self.origin}: generation must not be negative")

    def newer_than(self, other: RegionInventory | None) -> bool:
        """Whether this replaces ``other`` (the same origin's): a higher generation only. An equal generation with
        other content cannot come from an honest origin, and the first one heard stays."""
        return other is None or self.generation > other.generation


def of_inventory(
    origin: str, generation: int, produced_at: float, inventory: Inventory, headroom: Mapping[str, int] | None = None
) -> RegionInventory:
    """The summary of a region's ``gangs.inventory`` answer to publish; detached nodes (a multi-node platform's
    node without its domain label) are left out, as they take only single-pod gangs."""
    rooms = tuple(
        DomainRoom(d.platform, d.gpus_free, d.largest_pods, d.largest_gpus_per_pod)
        for d in inventory.domains
        if not d.detached
    )
    return RegionInventory(origin, generation, produced_at, rooms, dict(headroom or {}))


def fewest_domains(rooms: Iterable[DomainRoom], platform: str, pods: int, gpus_per_pod: int) -> int | None:
    """The fewest domains of ``platform`` that take ``pods`` pods of ``gpus_per_pod`` GPUs now (largest rooms
    first: optimal, since any k domains hold at most the k largest rooms' pods); None when all together do not."""
    if pods <= 0:
        return 0
    room = sorted((r.pods_of(gpus_per_pod) for r in rooms if r.platform == platform), reverse=True)
    held = 0
    for used, pods_here in enumerate(room, start=1):
        if pods_here <= 0:
            break
        held += pods_here
        if held >= pods:
            return used
    return None
