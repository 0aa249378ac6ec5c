"""GPUs held for pods not placed yet (a gang's plan), booked in the fleet like pods and kept across fleet rebuilds.

A gang's plan reserves one slot (node, GPUs) per pod still to place, so
that nothing else takes those GPUs while the gang's pods come one by one.
A reservation belongs to an *owner* (the gang's key) and is booked in the
fleet's bitmap exactly as a pod's GPUs are; the store holds it, so the fleet
has one set of bookings: bound pods, assumed pods, reservations.

When the store rebuilds the fleet (Nodes or Topologies changed) it books
bound pods, then assumed pods, then the reservations in the order they were
made, each all or nothing by node *name* (indices change with the fleet). A
reservation that no longer fits — a node gone, unusable, or without the free
GPUs — is dropped whole and its owner is remembered as *lost* until it
unreserves, so the plan's holder knows to plan again rather than keep half a
plan. Every method takes the fleet the bookings live in; the store passes its
current one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from kilter.topology.fleet import Fleet

__all__ = ["Held", "Reservations"]


class Held(NamedTuple):
    """One reserved slot: the node's name and its index in the fleet the GPUs are booked in, and the GPUs."""

    node: str
    node_index: int
    gpus: int


class Reservations:
    """Reservations by owner, in the order they were made (``dict`` order, which a rebuild replays)."""

    def __init__(self) -> None:
        self._held: dict[str, list[Held]] = {}
        self._lost: set[str] = set()

    def reserve(self, fleet: Fleet, owner: str, slots: Sequence[tuple[str, int]]) -> bool:
        """Book every (node name, GPUs) of ``slots`` for ``owner``, or nothing (False) if one does not fit.

        A slot fits when its node is in the fleet, usable, and has the GPUs
        free, counting the owner's other slots on the same node in this call.
        Slots are added to what the owner already holds.
        """
        placed = _place(fleet, slots)
        if placed is None:
            return False
        _book(fleet, placed)
        if placed:
            self._held.setdefault(owner, []).extend(placed)
        return True

    def release_slot(self, fleet: Fleet, owner: str, node: str, gpus: int) -> bool:
        """Give back one slot of ``owner`` on ``node`` of ``gpus`` GPUs; False if the owner holds no such slot."""
        held = self._held.get(owner, [])
        at = next((i for i, slot in enumerate(held) if (slot.node, slot.gpus) == (node, gpus)), None)
        if at is None:
            return False
        slot = held.pop(at)
        fleet.bitmap.release(slot.node_index, slot.gpus)
        if not held:
            del self._held[owner]
        return True

    def unreserve(self, fleet: Fleet, owner: str) -> None:
        """Give back everything ``owner`` holds, and forget that a rebuild lost its reservation."""
        for slot in self._held.pop(owner, []):
            fleet.bitmap.release(slot.node_index, slot.gpus)
        self._lost.discard(owner)

    def of(self, owner: str) -> tuple[Held, ...]:
        """What ``owner`` holds now, in the order reserved."""
        return tuple(self._held.get(owner, ()))

    def was_lost(self, owner: str) -> bool:
        """A fleet rebuild dropped ``owner``'s reservation (and it has not unreserved since)."""
        return owner in self._lost

    def rebook(self, fleet: Fleet) -> None:
        """Book every reservation again in a newly built ``fleet``, oldest first; drop (and mark lost) the unfit."""
        held, self._held = self._held, {}
        for owner, slots in held.items():
            placed = _place(fleet, [(slot.node, slot.gpus) for slot in slots])
            if placed is None:
                self._lost.add(owner)
                continue
            _book(fleet, placed)
            self._held[owner] = placed


def _place(fleet: Fleet, slots: Iterable[tuple[str, int]]) -> list[Held] | None:
    """The slots with their node indices in ``fleet``, or None when one does not fit (nothing is booked)."""
    placed: list[Held] = []
    need: dict[int, int] = {}
    for node, gpus in slots:
        index = fleet.node_index.get(node)
        if index is None or gpus <= 0 or not fleet.bitmap.node_usable_flags[index]:
            return None
        need[index] = need.get(index, 0) + gpus
        placed.append(Held(node, index, gpus))
    if any(fleet.bitmap.node_free_gpus(index) < gpus for index, gpus in need.items()):
        return None
    return placed


def _book(fleet: Fleet, placed: Iterable[Held]) -> None:
    """Book the placed slots' GPUs in ``fleet`` (``_place`` has checked that they fit)."""
    for slot in placed:
        fleet.bitmap.allocate(slot.node_index, slot.gpus)
