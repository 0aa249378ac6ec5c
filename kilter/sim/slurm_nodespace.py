"""Slurm backfill's node-space map for one cycle, and the earliest time a pending job fits under it.

Follows SchedMD/slurm at 284c3b95: ``src/plugins/sched/backfill/backfill.c``
(``_add_reservation``, ``_test_resv_overlap``, ``_set_slot_time``, the
``TRY_LATER`` loop of ``_attempt_backfill``) and the will-run test of
``src/plugins/select/cons_tres/job_test.c`` (``_will_run_test``,
``_future_run_test``, ``_guess_job_end``).

Slurm keeps the map as time slots, each with a bitmap of the nodes no
pending job has reserved; this module keeps the same information as one
interval per reservation and node, which is what the questions below need.
A reservation holds whole nodes from ``start`` to ``end``, both on the
``bf_resolution`` grid: ``start`` rounded down, ``end`` = start + time limit
rounded up (``_set_slot_time``), at least one resolution long.

A job of time limit L may start at t on a node when the node has the GPUs
it needs by t, as running jobs end at their expected ends
(``availability_times``), and no reservation on the node overlaps
[t, t + L). ``earliest`` finds the first such t, among the times a node
becomes available or a reservation ends, where the placement succeeds on
the nodes usable at t: what the ``TRY_LATER`` loop reaches by asking the
select plugin after each running job's end and retrying at each later
node-space slot, one step at a time. A running job's expected end is its
start plus its time limit; past it, Slurm assumes it runs one more time
limit from now (``_guess_job_end`` with ``OverTimeLimit=UNLIMITED``, the
setting under which jobs outlive their limits, as they do here). Slurm
orders running jobs by their stale ends and guesses only the last one
needed; here each overdue job is placed at its guessed end. Slurm's
will-run test also removes running jobs in groups ending within a time
window that doubles as it goes, which can place a start a little late; here
every end is tried, so the start is the earliest.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from kilter.sim.slurm_block import BlockLayout

__all__ = ["FirstFull", "NodeSpace", "availability_times", "earliest"]

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Select = Callable[[Bools], npt.NDArray[np.int32] | None]
MayFit = Callable[[Ints, Ints], Bools]


def availability_times(
    gpus: Ints, ends: Floats, limits: Floats, free: Ints, usable: Bools, *, need: int, now: float
) -> Floats:
    """Per node, when it first has ``need`` GPUs idle as its pods' jobs end as expected (``now`` if it has; inf
    if it never will: unusable, or too small).

    ``gpus``, ``ends``, ``limits``: [node, pod slot] of running pods (0 GPUs
    = empty slot), their jobs' expected ends (start + time limit) and limits;
    ``free``: idle GPUs per node now.
    """
    expected = np.where(ends > now, ends, now + limits)  # overdue: one more time limit from now
    capacity = free + gpus.sum(axis=1)
    if (capacity <= need).all():  # whole nodes (the common case): a node is ready when its last pod ends
        last = np.where(gpus > 0, expected, now).max(axis=1, initial=now)
        return np.where(usable & (capacity >= need), last, math.inf)
    expected = np.where(gpus > 0, expected, math.inf)
    order = np.argsort(expected, axis=1, kind="stable")
    sorted_ends = np.take_along_axis(expected, order, axis=1)
    freed = free[:, None] + np.cumsum(np.take_along_axis(gpus, order, axis=1), axis=1)
    enough = freed >= need
    first = np.argmax(enough, axis=1)
    out = np.where(enough.any(axis=1), sorted_ends[np.arange(len(first)), first], math.inf)
    out = np.where(free >= need, now, out)
    return np.where(usable, out, math.inf)


class NodeSpace:
    """The reservations of one backfill cycle: whole nodes held from a start to an end, on the resolution grid."""

    def __init__(self, n_nodes: int, *, now: float, window_s: float, resolution_s: float) -> None:
        self.resolution_s = resolution_s
        self.begin_s = math.floor(now / resolution_s) * resolution_s
        self.window_end_s = math.floor((now + window_s) / resolution_s) * resolution_s
        self.first_start = np.full(n_nodes, math.inf)  # per node: its earliest reservation's start
        self._node: Ints = np.empty(64, dtype=np.int64)  # one entry per reserved node: node, start, end
        self._start: Floats = np.empty(64)
        self._end: Floats = np.empty(64)
        self._count = 0
        self._bounds: set[float] = set()
        self.held: dict[int, list[tuple[float, float]]] = {}  # per node with reservations: (start, end), sorted

    @property
    def records(self) -> int:
        """node_space records the map would hold: one, plus one per distinct slot boundary inside the window."""
        return 1 + len(self._bounds)

    def slot(self, start_s: float, limit_s: float) -> tuple[float, float]:
        """``_set_slot_time`` and ``_add_reservation``'s clamps: the grid-aligned [start, end) a job starting at
        ``start_s`` for ``limit_s`` seconds reserves."""
        res = self.resolution_s
        start = max(math.floor(start_s / res) * res, self.begin_s)
        end = math.floor((start_s + limit_s + res - 1) / res) * res
        return start, max(end, start + res)

    def reserve(self, nodes: npt.NDArray[np.int32], start_s: float, end_s: float) -> None:
        """``_add_reservation``: ``nodes`` are held from ``start_s`` to ``end_s`` (grid-aligned, ``slot``)."""
        idx = np.asarray(nodes, dtype=np.int64)
        count = self._count + len(idx)
        if count > len(self._node):
            grown = max(count, 2 * len(self._node))
            self._node = np.resize(self._node, grown)
            self._start = np.resize(self._start, grown)
            self._end = np.resize(self._end, grown)
        self._node[self._count : count] = idx
        self._start[self._count : count] = start_s
        self._end[self._count : count] = end_s
        self._count = count
        self.first_start[idx] = np.minimum(self.first_start[idx], start_s)
        for n in idx.tolist():
            bisect.insort(self.held.setdefault(n, []), (start_s, end_s))
        self._bounds.update(b for b in (start_s, end_s) if self.begin_s < b < self.window_end_s)

    def free_now(self, now: float, limit_s: float) -> Bools:
        """Nodes a job starting at the cycle's ``now`` holds for ``limit_s`` without meeting a reservation (every
        reservation ends after now, so only its start matters)."""
        return self.first_start >= now + limit_s

    def free_during(self, start_s: float, limit_s: float) -> Bools:
        """Nodes no reservation holds at any time in [start, start + limit)."""
        free = np.ones(len(self.first_start), dtype=bool)
        if self._count:
            node, start, end = self._entries()
            free[node[(start < start_s + limit_s) & (end > start_s)]] = False
        return free

    def _entries(self) -> tuple[Ints, Floats, Floats]:
        n = self._count
        return self._node[:n], self._start[:n], self._end[:n]

    def gaps(self, nodes: Ints, ready: Floats, limit_s: float) -> tuple[Ints, Floats, Floats]:
        """For the nodes ``nodes`` (ascending, each ready at ``ready``): the closed intervals [lo, hi] of start
        times t at which a job of ``limit_s`` holds the node over [t, t + limit) without meeting a reservation."""
        if not self._count:
            keep = np.isfinite(ready)
            return nodes[keep], ready[keep], np.full(int(keep.sum()), math.inf)
        node, start, end = self._entries()
        member = np.zeros(len(self.first_start), dtype=bool)
        member[nodes] = True
        mine = member[node]
        node, start, end = node[mine], start[mine], end[mine]
        order = np.lexsort((start, node))
        node, start, end = node[order], start[order], end[order]
        pos = np.searchsorted(nodes, node)  # which of ``nodes`` each entry holds
        per_node = np.bincount(pos, minlength=len(nodes))
        seg = np.concatenate(([0], np.cumsum(per_node + 1)[:-1]))  # first gap of each node
        k = np.arange(len(node)) - np.concatenate(([0], np.cumsum(per_node)[:-1]))[pos]
        lo = np.empty(len(nodes) + len(node))
        hi = np.empty(len(nodes) + len(node))
        lo[seg] = -math.inf
        lo[seg[pos] + k + 1] = end  # a gap opens where a reservation ends...
        hi[seg[pos] + k] = start - limit_s  # ...and closes a time limit before the next one starts
        hi[seg + per_node] = math.inf
        owner = np.repeat(np.arange(len(nodes)), per_node + 1)
        lo = np.maximum(lo, ready[owner])
        keep = lo <= hi
        return nodes[owner[keep]], lo[keep], hi[keep]


def earliest(
    space: NodeSpace,
    layout: BlockLayout,
    *,
    ready: Floats,
    limit_s: float,
    until_s: float,
    one_block: FirstFull | None,
    need: int,
    may_fit: MayFit,
    select: Select,
) -> tuple[float, npt.NDArray[np.int32]] | None:
    """The first start time up to ``until_s`` at which ``select`` places the job on ``layout``'s nodes, and
    where; None if none.

    ``ready``: per fleet node, when it can take the job's pods
    (``availability_times``). With ``one_block``, the job fits exactly when
    one base block has ``need`` usable nodes (a job of one base block, no
    loose nodes in the partition), and ``FirstFull`` finds the time. Else
    candidate times are where a node's gap opens; at each, the nodes of every
    base block usable then are counted, ``may_fit`` filters the times (counts
    [time, base block], loose nodes [time]) and ``select`` decides, in time
    order.
    """
    if one_block is not None:
        t = one_block.first(need, limit_s)
        return None if t > until_s else _placed_at(space, t, ready, limit_s, select)
    node, lo, hi = space.gaps(layout.nodes, ready[layout.nodes], limit_s)
    keep = lo <= until_s
    node, lo, hi = node[keep], lo[keep], hi[keep]
    times = np.unique(lo)
    if not len(times):
        return None
    opens = np.searchsorted(times, lo)
    closes = np.searchsorted(times, hi, side="right")
    block = layout.bblock_of[node]
    rows = len(times) + 1
    width = layout.n_bblocks + 1  # the last column counts loose nodes
    col = np.where(block >= 0, block, layout.n_bblocks)
    delta = np.bincount(opens * width + col, minlength=rows * width)
    delta -= np.bincount(closes * width + col, minlength=rows * width)
    counts = np.cumsum(delta.reshape(rows, width), axis=0)[:-1]
    for r in np.flatnonzero(may_fit(counts[:, : layout.n_bblocks], counts[:, layout.n_bblocks])).tolist():
        placed = _placed_at(space, float(times[r]), ready, limit_s, select)
        if placed is not None:
            return placed
    return None


def _placed_at(
    space: NodeSpace, t: float, ready: Floats, limit_s: float, select: Select
) -> tuple[float, npt.NDArray[np.int32]] | None:
    """``select`` on the nodes usable from ``t`` for ``limit_s``: ready by then, and no reservation in the way."""
    placed = select((ready <= t) & space.free_during(t, limit_s))  # ``select`` reads only its layout's nodes
    return None if placed is None else (t, placed)


class FirstFull:
    """When each of a layout's base blocks first has a number of nodes usable for a time limit, within one cycle
    and for one ``ready`` (a start changes it: make a new one).

    A block no reservation touches has ``need`` nodes when its ``need``-th
    node is ready, whatever the limit; a block with reservations is swept
    once per (need, limit) and remembered until a reservation lands in it.
    """

    def __init__(self, space: NodeSpace, layout: BlockLayout, ready: Floats) -> None:
        self.space = space
        self.layout = layout
        self.ready = ready
        self.sorted_ready = np.sort(np.where(layout.filled, ready[layout.reads], math.inf), axis=1)
        self.held: Bools = layout.per_slot(np.isfinite(space.first_start)).sum(axis=1) > 0
        self._swept: dict[tuple[int, float], dict[int, float]] = {}
        self._ready_in: dict[int, list[tuple[int, float]]] = {}  # per block swept: its nodes that get ready

    def refresh(self, nodes: npt.NDArray[np.int32]) -> None:
        """``ready`` changed on ``nodes`` (a job started there): their blocks are sorted and swept again."""
        blocks = np.unique(self.layout.bblock_of[nodes])
        blocks = blocks[blocks >= 0]
        layout = self.layout
        self.sorted_ready[blocks] = np.sort(
            np.where(layout.filled[blocks], self.ready[layout.reads[blocks]], math.inf), axis=1
        )
        for b in blocks.tolist():
            self._ready_in.pop(b, None)
            for swept in self._swept.values():
                swept.pop(b, None)

    def reserved(self, nodes: npt.NDArray[np.int32]) -> None:
        """``nodes`` were just reserved (in ``space``): their blocks are swept again."""
        blocks = {b for b in self.layout.bblock_of[nodes].tolist() if b >= 0}
        self.held[list(blocks)] = True
        for swept in self._swept.values():
            for b in blocks:
                swept.pop(b, None)

    def first(self, need: int, limit_s: float) -> float:
        """The first time some block has ``need`` nodes usable for ``limit_s`` (inf: never)."""
        t = float(self.sorted_ready[~self.held, need - 1].min(initial=math.inf))
        swept = self._swept.setdefault((need, limit_s), {})
        held = np.flatnonzero(self.held)
        bound = self.sorted_ready[held, need - 1]  # a reservation only delays: no block is ready before this
        for b, lower in sorted(zip(held.tolist(), bound.tolist(), strict=True), key=lambda bl: bl[1]):
            if lower >= t:
                break
            tb = swept.get(b)
            if tb is None:
                tb = swept[b] = self._sweep(b, need, limit_s)
            t = min(t, tb)
        return t

    def _sweep(self, b: int, need: int, limit_s: float) -> float:
        ready = self._ready_in.get(b)
        if ready is None:
            nodes = self.layout.slots[b]
            nodes = nodes[nodes >= 0]
            times = self.ready[nodes]
            keep = np.isfinite(times)
            ready = self._ready_in[b] = list(zip(nodes[keep].tolist(), times[keep].tolist(), strict=True))
        held = self.space.held
        events: list[tuple[float, int]] = []  # (time, 0 = a gap opens, 1 = one closes after this time)
        for n, lo in ready:
            for start, end in held.get(n, ()):
                close = start - limit_s
                if lo <= close:
                    events.append((lo, 0))
                    events.append((close, 1))
                if end > lo:
                    lo = end
            events.append((lo, 0))
        events.sort()
        count = 0
        for time, kind in events:
            if kind:
                count -= 1
            else:
                count += 1
                if count >= need:
                    return time
        return math.inf
