"""Slurm's ``topology/block`` placement as a simulator baseline: base blocks per NVL72 rack, one level per leaf.

Follows SchedMD/slurm at 284c3b95 (2026-08-20):
``src/plugins/topology/block/eval_nodes_block.c`` (``eval_nodes_block``,
``_get_block_level``, ``_choose_best_bblock``), ``topology_block.c``
(``topology_p_eval_nodes``), ``block_record.c`` (``BlockSizes``) and the
``topology/block`` pages (``doc/html/topology.shtml``,
``doc/man/man5/topology.conf.5``, ``doc/man/man1/sbatch.1`` ``--segment``).

The topology.conf an operator writes for GB200 NVL72 (``BlockLayout``):
one ``BlockName`` per rack, i.e. per labelled scale-up domain (base block,
``BlockSizes[0]`` = trays per rack), listed leaf by leaf, each leaf padded
with empty placeholder blocks to a power of two, and one higher level per
leaf: ``BlockSizes=18,144`` for 8 racks per leaf. That is the two-level
layout NVIDIA's Topograph generates for ``topology/block``;
Slurm requires each level to be a power-of-two multiple of the one below
and aggregates *contiguous* base blocks, hence the padding, so that no
higher block straddles two leaves. The spine is left to Slurm's top level,
the whole topology. A tray without its clique label is in no block, as a
generator keyed on the label leaves it out; Slurm uses such nodes only for a
job none of whose available nodes is in a block (``topology_p_eval_nodes``),
and then, as a simplification, the first ones in node order.

Placement of a job of N nodes (``select``), as ``eval_nodes_block`` does
with equal node weights:

* the smallest configured block level holding ceil(N / base) base blocks,
  else the whole topology; below it the highest configured level is the
  "llblock" level, and the job may span at most ceil(N / llblock size)
  llblocks (for N <= 144 here: the fewest racks);
* among blocks of that level whose largest llblocks hold N, the one with the
  fewest available nodes (ties to the last block);
* inside it, base blocks one at a time (``_choose_best_bblock``): a base
  block that holds the rest whole, the tightest (ties to the last); else the
  roomiest; with llblocks, first those in llblocks already used, then the
  llblock that holds the rest (tightest) or else the roomiest; nodes are
  taken in node order.

``--segment=s`` runs that placement once per segment of s nodes on what is
left, each segment on its own (sbatch.1: no requirement ties them to one
higher block); with ``--consolidate-segments`` the first segment picks the
block of the job's level ("asblock") that the rest must share, and if they
do not fit there the next asblock is tried (``EVAL_ACTION_RETRY``).

A node is available to a job when it can take the job's largest pod (a
whole tray for a multi-tray job, its GPUs for a one-pod job); a multi-tray
job's partial last pod goes on the last node chosen. Where
``eval_nodes_block`` fails, Slurm's ``common_topo_choose_nodes`` also
retries after dropping low-resource nodes one by one; with identical trays
that order is arbitrary, and that retry is not modelled: the job does not
start.

``SlurmBlock.ask`` submits each job as the operator does: ``--segment`` by
``segment_for`` for a job bigger than a rack, and ``--consolidate-segments``
with it where one leaf can hold the job, so that a segmented job stays
under one leaf switch as every job without segments does (the block rule
keeps those in one leaf). A job one rack holds asks nothing: the block
plugin keeps it in one base block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter.sim.gangs import Gang, Slices
from kilter.sim.kueue_tas import labelled_domains
from kilter.sim.placement import Nodes, PerPlatform, free_gpus
from kilter.topology.fleet import Fleet

__all__ = ["BlockLayout", "SlurmBlock", "build_layout", "may_fit", "options", "segment_for", "select"]

Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class BlockLayout:
    """One platform's topology.conf as arrays: base blocks in ``BlockName`` order, their nodes, ``BlockSizes``."""

    slots: npt.NDArray[np.int32]  # [base block, slot]: fleet node index, -1 = no node (placeholder, missing tray)
    levels: tuple[int, ...]  # configured levels, ascending: log2 of base blocks per block; 0 = the base block
    loose: npt.NDArray[np.int32]  # the platform's nodes listed in no block (clique label missing), ascending
    nodes: npt.NDArray[np.int64]  # every node of the platform, ascending
    bblock_of: npt.NDArray[np.int64]  # per fleet node: its base block, -1 = in none (or another platform's)
    filled: npt.NDArray[np.bool_]  # [base block, slot]: the slot holds a node
    reads: npt.NDArray[np.int64]  # [base block, slot]: the slot's node, 0 where empty (mask with ``filled``)

    def per_slot(self, values: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """A per-fleet-node mask laid out as [base block, slot]; empty slots False."""
        return values[self.reads] & self.filled

    @property
    def base_size(self) -> int:
        return int(self.slots.shape[1])

    @property
    def n_bblocks(self) -> int:
        return int(self.slots.shape[0])

    def block_sizes(self) -> tuple[int, ...]:
        """``BlockSizes`` as the operator writes it, in nodes."""
        return tuple(self.base_size << level for level in self.levels)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def build_layout(fleet: Fleet, platform: int) -> BlockLayout:
    """The operator's topology.conf for ``platform``'s nodes (module docstring)."""
    bm = fleet.bitmap
    start = np.asarray(bm.domain_node_start, dtype=np.int64)
    mine = np.asarray(bm.domain_platforms) == platform
    labelled = mine & labelled_domains(fleet)
    doms = np.flatnonzero(labelled)
    if fleet.domain_group.shape[0]:
        group = np.asarray(fleet.domain_group[0], dtype=np.int64)[doms]
        group = np.where(group >= 0, group, int(group.max(initial=-1)) + 1)  # unlabelled leaves: one last leaf
    else:
        group = np.zeros(len(doms), dtype=np.int64)
    order = np.lexsort((doms, group))
    doms, group = doms[order], group[order]
    leaves, first, per_leaf = np.unique(group, return_index=True, return_counts=True)
    pad = _next_pow2(int(per_leaf.max(initial=1)))
    rank = np.searchsorted(leaves, group)
    bblock = rank * pad + (np.arange(len(doms)) - first[rank])
    sizes = start[doms + 1] - start[doms]
    p = fleet.platforms[platform]
    base = max(p.nodes_per_domain if p.is_multi_node else 1, int(sizes.max(initial=1)))
    slots = np.full((len(leaves) * pad, base), -1, dtype=np.int32)
    for b, d, size in zip(bblock.tolist(), doms.tolist(), sizes.tolist(), strict=True):
        slots[b, :size] = np.arange(start[d], start[d] + size)
    loose_doms = np.flatnonzero(mine & ~labelled)
    loose = np.concatenate([np.arange(start[d], start[d + 1]) for d in loose_doms] or [np.zeros(0)])
    nodes = np.concatenate([np.arange(start[d], start[d + 1]) for d in np.flatnonzero(mine)] or [np.zeros(0)])
    levels = (0,) if pad == 1 else (0, pad.bit_length() - 1)
    bblock_of = np.full(fleet.n_nodes, -1, dtype=np.int64)
    filled = slots >= 0
    bblock_of[slots[filled]] = np.broadcast_to(np.arange(len(slots))[:, None], slots.shape)[filled]
    loose_nodes = np.sort(loose).astype(np.int32)
    reads = np.where(filled, slots, 0).astype(np.int64)
    return BlockLayout(slots, levels, loose_nodes, np.sort(nodes).astype(np.int64), bblock_of, filled, reads)


def _levels_for(layout: BlockLayout, rem: int) -> tuple[int, int]:
    """``_get_block_level``: the block level that holds ``rem`` nodes (-1: the whole topology) and the llblock
    level below it."""
    need = (-(-rem // layout.base_size) - 1).bit_length()  # ceil(log2(base blocks needed))
    ll = max(level for level in layout.levels if level <= need - 1) if need > 0 else 0
    block = min((level for level in layout.levels if level >= need), default=-1)
    return block, ll


@dataclass(slots=True)
class _Best:
    """The running choice of ``_choose_best_bblock``: base block, does it hold the rest, is its llblock in use."""

    index: int = -1
    fit: bool = False
    same: bool = True


def _consider(i: int, best: _Best, *, rem: int, nob: Ints, nol: Ints | None, ll: int, required: Bools) -> None:
    """``_choose_best_bblock`` for base block ``i``: fewer llblocks first, then fewer base blocks (best fit)."""
    fit = bool(nob[i] >= rem)
    if nol is not None and (best.index >> ll) != (i >> ll):
        lo = (i >> ll) << ll
        same = bool(required[lo : lo + (1 << ll)].any())
        if best.index == -1 or (same and not best.same):
            best.index, best.fit, best.same = i, fit, same
            return
        if not same and best.same:
            return
        mine, theirs = int(nol[i >> ll]), int(nol[best.index >> ll])
        if (mine >= rem) != (theirs >= rem):
            if mine >= rem:
                best.index, best.fit, best.same = i, fit, same
            return
        if mine != theirs:
            if (mine < theirs) == (mine >= rem):  # both hold the rest: the tighter; neither: the roomier
                best.index, best.fit, best.same = i, fit, same
            return
    j = best.index
    if (
        j == -1
        or (fit and not best.fit)
        or (not fit and not best.fit and nob[i] >= nob[j])
        or (fit and nob[i] <= nob[j])
    ):
        best.index, best.fit = i, fit


def _tightest(counts: Sequence[int], rem: int) -> int:
    """The base block of fewest available nodes that still holds ``rem``, the last of equals; -1 if none."""
    best, room = -1, 1 << 62
    for b, c in enumerate(counts):  # a few dozen blocks: plain Python beats four numpy calls
        if rem <= c <= room:
            best, room = b, c
    return best


def _eval_one(layout: BlockLayout, ok: Bools, rem: int) -> Bools | None:
    """One ``eval_nodes_block`` pass for ``rem`` nodes on the available slots ``ok``: the slots taken, or None."""
    n_bb = layout.n_bblocks
    counts = ok.sum(axis=1)
    if rem <= layout.base_size:  # block level 0: the tightest base block that holds it, ties to the last
        b = _tightest(counts.tolist(), rem)
        if b < 0:
            return None
        out = np.zeros_like(ok)
        out[b, np.flatnonzero(ok[b])[:rem]] = True
        return out
    block, ll = _levels_for(layout, rem)
    per_block = n_bb if block < 0 else 1 << block
    per_ll = 1 << ll
    max_ll = -(-rem // (per_ll * layout.base_size))
    n_blocks = -(-n_bb // per_block)
    on_block = np.bincount(np.arange(n_bb) // per_block, weights=counts, minlength=n_blocks).astype(np.int64)
    use_ll = per_block != per_ll * max_ll
    if use_ll:
        on_ll = np.bincount(np.arange(n_bb) // per_ll, weights=counts).astype(np.int64)
        ll_per_block = per_block // per_ll
        top = [np.sort(on_ll[b * ll_per_block : (b + 1) * ll_per_block])[::-1][:max_ll].sum() for b in range(n_blocks)]
        enough = np.asarray(top) >= rem
    else:
        enough = on_block >= rem
    eligible = np.flatnonzero(enough & (on_block > 0))
    if not len(eligible):
        return None
    chosen = int(eligible[on_block[eligible] == on_block[eligible].min()][-1])
    members = range(chosen * per_block, min((chosen + 1) * per_block, n_bb))
    nob = counts.astype(np.int64)
    nol = np.bincount(np.asarray(members) // per_ll, weights=nob[members.start : members.stop], minlength=n_bb)
    nol_arg = nol.astype(np.int64) if use_ll else None
    required = np.zeros(n_bb, dtype=bool)
    out = np.zeros_like(ok)
    left_ll = max_ll
    prev = rem + 1
    while prev != rem:  # stops when a pass adds no node ("Stalled")
        prev = rem
        best = _Best()
        for i in members:
            if not required[i]:
                _consider(i, best, rem=rem, nob=nob, nol=nol_arg, ll=ll, required=required)
        if best.index == -1 or (left_ll <= 0 and not best.same):
            break
        required[best.index] = True
        take = np.flatnonzero(ok[best.index])[:rem]
        out[best.index, take] = True
        rem -= len(take)
        if rem <= 0:
            return out
        if not best.same:
            left_ll -= 1
    return None


def select(
    layout: BlockLayout, available: Bools, nodes: int, *, segment: int = 0, consolidate: bool = False
) -> npt.NDArray[np.int32] | None:
    """The ``nodes`` fleet nodes Slurm allocates from ``available`` (a mask over the fleet's nodes), ascending, or
    None; ``segment`` > 0 places them ``segment`` at a time (``--segment``), all in one block of the level that
    holds the whole job if ``consolidate`` (``--consolidate-segments``)."""
    ok = layout.per_slot(available)
    counts = ok.sum(axis=1)
    if not counts.any():  # topology_p_eval_nodes: no block node to use, so no block rule either
        loose = layout.loose[available[layout.loose]]
        return loose[:nodes] if len(loose) >= nodes else None
    if segment >= nodes:
        segment = 0  # "Ignoring segment_size": the job fits one segment
    if segment and nodes % segment:
        return None
    if not segment and nodes <= layout.base_size:  # the common case, without building masks
        b = _tightest(counts.tolist(), nodes)
        return None if b < 0 else layout.slots[b][ok[b]][:nodes]
    if segment and consolidate and segment <= layout.base_size:
        taken = _consolidated(layout, ok, nodes, segment)
    else:
        taken = _segments(layout, ok, nodes // segment if segment else 1, segment or nodes)
    return None if taken is None else np.sort(layout.slots[taken]).astype(np.int32)


def _segments(layout: BlockLayout, ok: Bools, count: int, size: int) -> Bools | None:
    """``count`` passes of ``eval_nodes_block`` for ``size`` nodes each, each on what the others left."""
    if size <= layout.base_size:  # each pass: the tightest base block, its first ``size`` nodes left
        counts = ok.sum(axis=1).tolist()
        used = [0] * len(counts)
        for _ in range(count):
            b = _tightest(counts, size)
            if b < 0:
                return None
            counts[b] -= size
            used[b] += size
        taken = np.zeros_like(ok)
        for b, n in enumerate(used):
            if n:
                taken[b, np.flatnonzero(ok[b])[:n]] = True
        return taken
    taken = np.zeros_like(ok)
    for _ in range(count):
        part = _eval_one(layout, ok & ~taken, size)
        if part is None:
            return None
        taken |= part
    return taken


def _consolidated(layout: BlockLayout, ok: Bools, nodes: int, segment: int) -> Bools | None:
    """``--consolidate-segments``: the first segment goes to the tightest base block among those whose block of
    the job's level ("asblock") has ``nodes`` available, and the rest must follow it there; when they do not
    fit, that block is dropped and the next tried (``EVAL_ACTION_RETRY`` in ``common_topo_choose_nodes``)."""
    level, _ = _levels_for(layout, nodes)
    group = np.arange(layout.n_bblocks) // (layout.n_bblocks if level < 0 else 1 << level)
    left = ok.copy()
    while True:
        counts = left.sum(axis=1)
        room = np.bincount(group, weights=counts)[group]
        b = _tightest(np.where(room >= nodes, counts, 0).tolist(), segment)
        if b < 0:
            return None
        inside = (group == group[b])[:, None]
        taken = _segments(layout, left & inside, nodes // segment, segment)
        if taken is not None:
            return taken
        left &= ~inside


def may_fit(
    layout: BlockLayout, counts: Ints, loose: Ints, nodes: int, *, segment: int = 0, consolidate: bool = False
) -> Bools:
    """Per row of ``counts`` ([time, base block]: available nodes) and ``loose`` ([time]): could ``select`` succeed?

    A necessary condition, exact but for ``select``'s stalls: a segment or
    a job of one base block needs that many nodes in one base block (and
    segments take from a base block as if alone, so whole segments add up,
    within one block of the job's level when consolidated); a bigger job
    needs a block of its level whose roomiest llblocks hold it.
    """
    blocked: Bools = counts.sum(axis=1) > 0
    fallback: Bools = ~blocked & (loose >= nodes)
    fits: Bools
    if segment and segment < nodes:
        if nodes % segment:
            return np.zeros(len(counts), dtype=bool)
        whole = counts // segment
        level = _levels_for(layout, nodes)[0] if consolidate and segment <= layout.base_size else -1
        if level >= 0:  # whole segments in one block of the job's level
            per = 1 << level
            padded = np.zeros((len(counts), -(-layout.n_bblocks // per) * per), dtype=np.int64)
            padded[:, : layout.n_bblocks] = whole
            whole = padded.reshape(len(counts), -1, per).sum(axis=2)
            fits = whole.max(axis=1, initial=0) >= nodes // segment
        else:
            fits = whole.sum(axis=1) >= nodes // segment
        return fallback | (blocked & fits)
    if nodes <= layout.base_size:
        fits = counts.max(axis=1, initial=0) >= nodes
        return fallback | fits
    block, ll = _levels_for(layout, nodes)
    n_bb = layout.n_bblocks
    per_block = n_bb if block < 0 else 1 << block
    per_ll = 1 << ll
    max_ll = -(-nodes // (per_ll * layout.base_size))
    n_blocks = -(-n_bb // per_block)
    padded = np.zeros((len(counts), n_blocks * per_block), dtype=np.int64)
    padded[:, :n_bb] = counts
    on_ll = padded.reshape(len(counts), n_blocks, per_block // per_ll, per_ll).sum(axis=3)
    top = -np.sort(-on_ll, axis=2)[:, :, :max_ll].sum(axis=2)
    fits = (top >= nodes).any(axis=1)
    return fallback | (blocked & fits)


def segment_for(nodes: int, base_size: int) -> int:
    """The ``--segment`` an operator of NVL72 racks gives a job of ``nodes`` trays; 0 for none.

    A job one rack holds gets none: the block plugin already keeps it in one
    base block, and a segment could only let it split. A bigger job gets the
    largest segment that divides it and fits a rack (sbatch.1: the node count
    must be a multiple of the segment), so each NVLink group stays in one rack
    (NVIDIA's guidance for GB200: segments of 16 trays for jobs of 128+ GPUs),
    but only when those segments need no more racks than the job's fewest
    possible, ceil(nodes / rack): segments of 10 for 40 trays would hold a job
    that three racks could take on four, and then the plain block rule (the
    fewest racks, in one leaf) serves it better.
    """
    if nodes <= base_size:
        return 0
    size = max(d for d in range(1, base_size + 1) if nodes % d == 0)
    return size if nodes // size == -(-nodes // base_size) else 0


def options(gang: Gang) -> tuple[int, bool]:
    """The gang's ``--segment`` (its level-0 slice size, 0 for none) and ``--consolidate-segments`` (a slice
    above level 0)."""
    segment = next((size for level, size in gang.slices if level == 0), 0)
    return segment, any(level > 0 for level, _ in gang.slices)


class SlurmBlock:
    """Slurm's ``topology/block`` placement with ``--segment`` set per job as an NVL72 operator does."""

    name = "slurm"

    def __init__(self) -> None:
        self._layouts = PerPlatform(build_layout)

    def layout(self, fleet: Fleet, platform: int) -> BlockLayout:
        return self._layouts.of(fleet, platform)

    def ask(self, fleet: Fleet, gang: Gang) -> Gang:
        """The gang as submitted (``placement.Asking``): ``--segment=s`` as level-0 slices of ``s`` pods, and
        ``--consolidate-segments`` as one level-1 slice of all of them where one leaf can hold the job."""
        layout = self.layout(fleet, gang.platform)
        segment = segment_for(gang.pods, layout.base_size)
        if not segment:
            return dataclasses.replace(gang, topology="preferred", level=0, slices=())
        inner: Slices = ((0, segment),)
        if _levels_for(layout, gang.pods)[0] >= 0:
            inner = ((1, gang.pods), *inner)
        return dataclasses.replace(gang, topology="preferred", level=0, slices=inner)

    def select(self, fleet: Fleet, gang: Gang, available: Bools) -> Nodes | None:
        """Node per pod for ``gang`` on the nodes ``available`` says can take its largest pod, or None; a
        ``required`` gang is refused where the allocation leaves one domain of its level."""
        layout = self.layout(fleet, gang.platform)
        segment, consolidate = options(gang)
        chosen = select(layout, available, gang.pods, segment=segment, consolidate=consolidate)
        if chosen is None:
            return None
        if gang.topology == "required":
            where = (
                fleet.node_domain[chosen]
                if gang.level == 0
                else fleet.domain_group[gang.level - 1][fleet.node_domain[chosen]]
            )
            if len(np.unique(where)) > 1 or (where < 0).any():
                return None
        return chosen

    def available(self, fleet: Fleet, gang: Gang) -> Bools:
        """Nodes that can take the gang's largest pod now (usable, that many GPUs idle)."""
        return free_gpus(fleet) >= max(gpus for _, gpus in gang.pod_sets)

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        return self.select(fleet, gang, self.available(fleet, gang))
