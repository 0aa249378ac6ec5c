"""Backfill around kept reservations: where a job may start now without delaying a gang promised a start.

One rule for every door that places work: the simulator's ``Reserving``,
the gang book behind the kube-scheduler extender and Volcano's verbs, and
the AdmissionCheck. ``steer`` takes a placement the planner chose: it stands
when it delays no reservation of another's (``blocking_reservation``: the job ends
first, uses slack no claim needs, or leaves the gang room in its domains);
else the planner is asked again with the reserved domains left out; else
the job waits, and the reservation it would delay says why. ``blocked_nodes``
answers the same question for one pod on each node at once, for a pod of
no gang judged node by node (the filter, the predicate): per node, the
reservation that pod would delay there, exactly ``blocking_reservation`` for
that one pod.

Pure, as ``reservations`` is: arrays and frozen values in, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt

from kilter.topology.reservations import (
    Holdings,
    NodeSpace,
    Reservation,
    assign,
    avoid_nodes,
    blocking_reservation,
    room_at,
)
from kilter.topology.split_wait import QueueLoad

__all__ = ["Outcome", "Replan", "Steered", "blocked_nodes", "by_start", "steer", "worth_keeping"]

Ints = npt.NDArray[np.int64]
Replan = Callable[[npt.NDArray[np.bool_]], tuple[Ints, Ints] | None]
"""The planner asked again on the nodes a mask allows: (node per pod, GPUs per pod), or None when nothing fits."""


class Outcome(Enum):
    CLEAR = "clear"  # no reservation of another's in its way
    BACKFILLED = "backfilled"  # in a reserved domain, delaying no one
    STEERED = "steered"  # planned again, away from the reserved domains
    WAITS = "waits"  # every plan would delay a reservation


@dataclass(frozen=True, slots=True)
class Steered:
    """Where a job starts now (``nodes``, ``gpus`` per pod; None when it ``WAITS``) and the reservation it would
    have delayed (``blocking``: what it was steered away from or waits for)."""

    outcome: Outcome
    nodes: Ints | None
    gpus: Ints | None
    blocking: Reservation | None = None


def worth_keeping(gpus: int, gpus_per_node: int, load: QueueLoad | None) -> bool:
    """Whether the oldest waiting gang of a queue gets a reservation every door keeps (EASY backfill: one per
    queue, for a gang bigger than one node, which smaller jobs would otherwise keep overtaking).

    A kept reservation has a price, as a split has: the room it keeps from
    the jobs behind it. While jobs have queued all along a span as long as
    the gang's expected run (``QueueLoad.saturated``), that room comes out of
    a backlog that outlasts it, so no reservation is kept and the gang waits
    as a required gang waits in Kueue; without an expected run (``load``
    None) nothing tells when room comes, and none is kept either.
    """
    return gpus > gpus_per_node and load is not None and not load.saturated


def by_start(reservations: Sequence[Reservation]) -> list[Reservation]:
    """Reservations in the order a job meets them: by start, then owner (``blocking_reservation``'s order)."""
    return sorted(reservations, key=lambda r: (r.start_s, r.owner))


def steer(
    nodes: Ints,
    gpus: Ints,
    expected_end_s: float,
    space: NodeSpace,
    holdings: Holdings,
    reservations: Sequence[Reservation],
    now_s: float,
    owner: str | None,
    replan: Replan,
) -> Steered:
    """The placement ``nodes`` if it delays no reservation of another's, else the planner's placement away from the
    reserved domains if that delays none, else ``WAITS`` (module docstring)."""
    others = [r for r in reservations if r.owner != owner]
    if not others:
        return Steered(Outcome.CLEAR, nodes, gpus)
    blocking = blocking_reservation(nodes, gpus, expected_end_s, space, holdings, others, now_s, owner)
    if blocking is None:
        reserved = {d for r in others for d in r.domains}
        inside = not reserved.isdisjoint(space.node_domain[nodes].tolist())
        return Steered(Outcome.BACKFILLED if inside else Outcome.CLEAR, nodes, gpus)
    avoid = avoid_nodes(space, others, expected_end_s, owner)
    found = replan(~avoid)
    if found is not None:
        again = blocking_reservation(found[0], found[1], expected_end_s, space, holdings, others, now_s, owner)
        if again is None:
            return Steered(Outcome.STEERED, found[0], found[1], blocking)
    return Steered(Outcome.WAITS, None, None, blocking)


def blocked_nodes(
    gpus: int,
    expected_end_s: float,
    space: NodeSpace,
    holdings: Holdings,
    reservations: Sequence[Reservation],
    now_s: float,
    owner: str | None = None,
) -> Ints:
    """Per node, the index into ``by_start(reservations)`` of the reservation one pod of ``gpus`` GPUs, ending at
    ``expected_end_s``, would delay by starting there now, or -1: ``blocking_reservation`` for that pod alone, on
    every node at once.

    Only the nodes of a reservation's domains that lack slack for the pod
    are tried whole (can the gang still be placed in its domains around
    it?), so the cost grows with the reserved domains, not the fleet. A pod
    is no reservation's owner unless ``owner`` says so.
    """
    n = len(space.free)
    out = np.full(n, -1, np.int64)
    if gpus <= 0:
        return out
    ordered = by_start(reservations)
    for i, r in enumerate(ordered):
        if r.owner == owner or expected_end_s <= r.start_s:
            continue
        mine = space.nodes_of(r.domains)
        todo = mine[out[mine] < 0]
        if not len(todo):
            continue
        room = room_at(r, ordered, space, holdings, now_s)
        for node in todo[room.slack[todo] < gpus].tolist():
            if not room.shared:
                left = np.clip(room.around, 0, None)
                left[node] = max(int(room.around[node]) - gpus, 0)
                if assign(left, mine, r.pod_sets) is not None:
                    continue
            out[node] = i
    return out
