"""``reservations.earliest_start``'s answer behind hundreds of reservations, asked of a few at a time.

``earliest_start`` tries the moments in turn (now, then each expected end)
and at each one sums every earlier reservation's claim over every node:
behind hundreds of pending gangs on a fleet of thousands of nodes, a
queue's expected starts take tens of seconds. Few reservations matter at
once. ``first_start`` asks ``earliest_start`` itself, first with none at all
(a bound: reservations only take room), then over the moments from there in
growing bands, each time with ``now`` moved to the band's first moment (what
ended by then has freed its GPUs) and only the reservations whose window
meets a start in the band; those that meet every start in it claim the same
all along, so they go as one. The first band that holds the start gives the
very reservation the whole list would: within it every start sees the same
claims, and no earlier moment fit with fewer in the way (only later
moments see more free GPUs, so a moment that is no expected end of anything
asked never fits first). One on another platform claims nothing here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kilter.topology.reservations import Holdings, NodeSpace, Reservation, earliest_start, window_end

__all__ = ["first_start"]

FIRST_BAND = 8  # moments asked about together at first; most gangs start within them


def first_start(
    owner: str,
    pod_sets: Sequence[tuple[int, int]],
    k: int,
    space: NodeSpace,
    holdings: Holdings,
    reservations: Sequence[Reservation],
    now_s: float,
    runtime_s: float | None,
) -> Reservation | None:
    """What ``earliest_start`` answers for these arguments (module docstring)."""
    base = earliest_start(owner, pod_sets, k, space, holdings, (), now_s, runtime_s)
    mine = [r for r in reservations if space.capacity[np.asarray(r.nodes, np.int64)].any()]
    if base is None or not mine:
        return base
    runtime = math.inf if runtime_s is None else runtime_s
    starts = np.asarray([r.start_s for r in mine])
    stops = np.asarray([window_end(r.start_s, r.expected_end_s) for r in mine])
    moments = np.unique(np.concatenate(([base.start_s], holdings.end_s, [r.expected_end_s for r in mine])))
    moments = moments[np.isfinite(moments) & (moments >= base.start_s)]
    first, width = 0, FIRST_BAND
    while True:
        last = min(first + width, len(moments) - 1)
        t0, horizon = float(moments[first]), float(moments[last])
        meets = (starts < window_end(horizon, horizon + runtime)) & (stops > t0)
        always = meets & (starts < window_end(t0, t0 + runtime)) & (stops > horizon)
        band = [mine[i] for i in np.flatnonzero(meets & ~always).tolist()]
        if always.any():
            band.append(_as_one([mine[i] for i in np.flatnonzero(always).tolist()]))
        found = earliest_start(owner, pod_sets, k, space, holdings, band, t0, runtime_s)
        if found is not None and found.start_s <= horizon:
            return found
        if last == len(moments) - 1:
            return None
        first, width = last + 1, width * 4


def _as_one(reservations: Sequence[Reservation]) -> Reservation:
    """Reservations whose windows all meet a band's every start, as one: their claims over their windows' span."""
    return Reservation(
        "(gangs ahead)",
        min(r.start_s for r in reservations),
        max(window_end(r.start_s, r.expected_end_s) for r in reservations),
        (),
        (),
        tuple(x for r in reservations for x in r.nodes),
        tuple(x for r in reservations for x in r.gpus),
        (),
    )
