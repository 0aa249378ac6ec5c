"""Repair plans: where the replacement pods of a running gang go, next to the pods that survived.

A gang that lost some pods to failed nodes does not want the best place for
those pods taken alone; it wants them where its other pods are: the NCCL
rings of a rank run to its neighbours, and those sit in its old scale-up
domain. So each replacement takes the first rung of this ladder that has
room (``STEPS``):

1. ``same-node``: the node its rank held, if that node is usable again and
   has the GPUs free (a pod that crashed on a healthy node);
2. ``same-domain``: the best-fitting node of the scale-up domain its rank
   held (the domain holding most of the gang when the rank's node is not
   known);
   ``reclaim``: else, where the caller says which GPUs of that domain the
   gang may take back by preemption (``reclaimable``: a domain that lends
   its spares to pods of lower priority, ``spares.lent_to``), the node of
   the domain that frees enough by preempting the fewest GPUs (then the
   lowest index). The plan names it; the scheduler's preemption evicts
   those pods before the replacement binds there;
3. the nearest other domain, nearest by the topology levels above domains
   (same block first, then each level up): ``gang-domain`` when the gang
   already runs there (its domain count stays), else ``new-domain``, a
   domain that takes every replacement still to place if one does (the
   count grows by one only), best fit among those.

The rungs are taken in passes over all replacements, in the order given
(the caller's rank order): first every rank whose node is back, then every
rank that can stay in its domain, then the rest. So no replacement moving
away takes the room another one needed to stay home. The answer is all or nothing: a gang
cannot resume with a rank missing, so if one replacement finds no node the
repair fails, saying which, and nothing is taken. Within a rung, the node is
the best fit (fewest free GPUs that are enough, then the lowest index), the
planner's rule for whole gangs, so a repair leaves whole trays whole where it
can. Nodes in detached one-node domains (a multi-node platform's node that
lost its clique label) are never used: they cannot join a gang's NVLink
fabric.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from kilter._native import domains, gang
from kilter.topology.fleet import Fleet

__all__ = ["STEPS", "RepairChoice", "Replacement", "Step", "describe", "repair", "within", "within_level"]

Step = Literal["same-node", "same-domain", "reclaim", "gang-domain", "new-domain"]
STEPS: tuple[Step, ...] = ("same-node", "same-domain", "reclaim", "gang-domain", "new-domain")


@dataclass(frozen=True)
class Replacement:
    """One pod to place: its GPUs, the fleet index of the node its rank held (None: not known, or gone), and the
    nodes this pod alone may use (its own selectors: a pod set pinned to a domain at admission), None for any."""

    gpus: int
    home: int | None = None
    allowed: npt.NDArray[np.bool_] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class RepairChoice:
    """Where one replacement goes (a fleet node index), by which rung, and how far (in topology levels above the
    domain: 0 same domain, 1 same block ...) from the domain it was measured from."""

    node: int
    step: Step
    distance: int


def repair(
    fleet: Fleet,
    platform: int,
    survivors: Sequence[int],
    wanted: Sequence[Replacement],
    *,
    node_ok: npt.NDArray[np.bool_] | None = None,
    reclaimable: npt.NDArray[np.int32] | None = None,
) -> tuple[RepairChoice, ...] | str:
    """A node for each of ``wanted`` on ``platform`` (an index into ``fleet.platforms``), near ``survivors`` (the
    fleet indices of the gang's bound pods' nodes), or why there is none (module docstring).

    ``node_ok`` narrows the nodes the pods may use (their selectors and
    tolerations, as ``eligibility.node_mask`` reads them). ``reclaimable``:
    per node, the GPUs the gang may take back by preemption (the ``reclaim``
    rung; None: none). Nothing is booked: the caller reserves what it keeps.
    """
    bm = fleet.bitmap
    node_domain = fleet.node_domain
    dom_ok = (bm.domain_platforms == platform) & ((bm.domain_flags & domains.DETACHED) == 0)
    usable = (bm.node_usable_flags != 0) & dom_ok[node_domain]
    if node_ok is not None:
        usable &= node_ok
    free = np.where(usable, bm.node_gpu_counts - bm.node_used_gpus, -1).astype(np.int32)
    in_gang = np.zeros(len(dom_ok), dtype=np.int32)
    np.add.at(in_gang, node_domain[np.asarray(survivors, dtype=np.int64)], 1)
    fallback = int(np.argmax(in_gang)) if len(survivors) else -1
    homes = [w.home if w.home is not None and 0 <= w.home < fleet.n_nodes else None for w in wanted]
    refs = [int(node_domain[h]) if h is not None else fallback for h in homes]
    chosen: list[RepairChoice | None] = [None] * len(wanted)

    def take(i: int, choice: RepairChoice) -> None:
        chosen[i] = choice
        free[choice.node] -= wanted[i].gpus
        in_gang[node_domain[choice.node]] += 1

    def room(i: int) -> npt.NDArray[np.bool_]:
        fits: npt.NDArray[np.bool_] = free >= wanted[i].gpus
        allowed = wanted[i].allowed
        return fits if allowed is None else fits & allowed

    for i, home in enumerate(homes):  # every rank whose node is back first: no other replacement may take it
        allowed = wanted[i].allowed
        if home is not None and free[home] >= wanted[i].gpus and (allowed is None or allowed[home]):
            take(i, RepairChoice(home, "same-node", 0))
    for i, ref in enumerate(refs):  # then every rank that can stay in its domain
        if chosen[i] is None and ref >= 0:
            here = np.flatnonzero(room(i) & (node_domain == ref))
            if len(here):
                take(i, RepairChoice(_best_fit(free, here), "same-domain", 0))
    if reclaimable is not None:  # then every rank that can stay by taking back a lent spare
        back = reclaimable.astype(np.int32)
        for i, ref in enumerate(refs):
            if chosen[i] is None and ref >= 0:
                node = _reclaim(free, back, node_domain == ref, wanted[i])
                if node is not None:
                    taken_back = wanted[i].gpus - min(int(free[node]), wanted[i].gpus)
                    back[node] -= taken_back
                    free[node] += taken_back  # ``take`` then books the whole pod on the freed node
                    take(i, RepairChoice(node, "reclaim", 0))
    for i, want in enumerate(wanted):
        if chosen[i] is not None:
            continue
        still = [w for w, c in zip(wanted, chosen, strict=True) if c is None]
        choice = _elsewhere(fleet, free, in_gang, room(i), refs[i], still)
        if choice is None:
            where = f"near {fleet.domain_ids[refs[i]]}" if refs[i] >= 0 else "anywhere"
            return (
                f"replacement {i + 1} of {len(wanted)} ({want.gpus} GPUs) finds no usable "
                f"{fleet.platforms[platform].name} node {where} with the GPUs free"
            )
        take(i, choice)
    return tuple(c for c in chosen if c is not None)


def _reclaim(
    free: npt.NDArray[np.int32], back: npt.NDArray[np.int32], here: npt.NDArray[np.bool_], want: Replacement
) -> int | None:
    """The node of ``here`` whose free GPUs plus those it may take back hold ``want``, taking back the fewest
    (then the lowest index); None if none does."""
    fits = here & (free >= 0) & (free < want.gpus) & (free + back >= want.gpus)
    if want.allowed is not None:
        fits &= want.allowed
    nodes = np.flatnonzero(fits)
    if not len(nodes):
        return None
    taken = want.gpus - free[nodes]
    return int(nodes[np.argmin(taken)])  # argmin takes the first minimum; ``nodes`` is ascending


def _elsewhere(
    fleet: Fleet,
    free: npt.NDArray[np.int32],
    in_gang: npt.NDArray[np.int32],
    room: npt.NDArray[np.bool_],
    ref: int,
    still: Sequence[Replacement],
) -> RepairChoice | None:
    """The third rung: the nearest domain with room (``room``: the nodes this replacement fits and may use), one
    the gang uses before a new one."""
    fits = np.flatnonzero(room)
    if not len(fits):
        return None
    doms = fleet.node_domain[fits]
    distance = _distances(fleet, ref)[doms]
    near = int(distance.min())
    ours = (distance == near) & (in_gang[doms] > 0)
    if ours.any():
        return RepairChoice(_best_fit(free, fits[ours]), "gang-domain", near)
    nodes = fits[distance == near]
    return RepairChoice(_best_fit(free, _best_new_domain(fleet, free, nodes, still)), "new-domain", near)


def _best_new_domain(
    fleet: Fleet, free: npt.NDArray[np.int32], nodes: npt.NDArray[np.intp], still: Sequence[Replacement]
) -> npt.NDArray[np.intp]:
    """The nodes of the one domain (among ``nodes``' domains) that should take the replacements still to place:
    one that holds them all with the fewest GPUs left over; else the one that holds the most of them."""
    doms = fleet.node_domain[nodes]
    best: tuple[int, int, int] | None = None
    for d in np.unique(doms).tolist():
        room = np.sort(free[nodes[doms == d]])
        held = _holds(room, [w.gpus for w in still])
        leftover = int(room.sum()) - sum(w.gpus for w in still[:held])
        key = (-held, leftover, d)
        if best is None or key < best:
            best = key
    assert best is not None
    chosen: npt.NDArray[np.intp] = nodes[doms == best[2]]
    return chosen


def _holds(room: npt.NDArray[np.int32], asks: Sequence[int]) -> int:
    """How many of ``asks``, in order, fit on nodes with ``room`` free GPUs, each on the best-fitting node."""
    left = room.tolist()
    for n, g in enumerate(asks):
        fit = [i for i, r in enumerate(left) if r >= g]
        if not fit:
            return n
        at = min(fit, key=lambda i: left[i])
        left[at] -= g
    return len(asks)


def _best_fit(free: npt.NDArray[np.int32], nodes: npt.NDArray[np.intp]) -> int:
    """The node with the fewest free GPUs among ``nodes`` (all of which fit), the lowest index on a tie."""
    return int(nodes[np.argmin(free[nodes])])  # argmin takes the first minimum; ``nodes`` is ascending


def _distances(fleet: Fleet, ref: int) -> npt.NDArray[np.int32]:
    """Per domain, how far it is from domain ``ref``: 0 itself, l + 1 when they first share a group at level l
    (0 is the level just above domains), the number of levels + 1 when they share none (or ``ref`` is -1)."""
    groups = fleet.domain_group
    levels = groups.shape[0]
    out = np.full(len(fleet.domain_ids), levels + 1, dtype=np.int32)
    if ref < 0:
        return out
    for level in range(levels - 1, -1, -1):
        mine = groups[level, ref]
        if mine >= 0:
            out[groups[level] == mine] = level + 1
    out[ref] = 0
    return out


def describe(fleet: Fleet, choice: RepairChoice) -> str:
    """The rung a choice took, in words: "same scale-up domain", "a domain the gang uses, same <block>" ..."""
    if choice.step == "same-node":
        return "its own node, usable again"
    if choice.step == "same-domain":
        return "same scale-up domain"
    if choice.step == "reclaim":
        return "same scale-up domain, a lent spare taken back by preempting lower-priority pods"
    keys = fleet.levels.up_keys
    near = "elsewhere"
    if 0 < choice.distance <= len(keys):
        near = f"same {fleet.levels.describe(keys[choice.distance - 1])}"
    return f"{'a domain the gang uses' if choice.step == 'gang-domain' else 'a new domain'}, {near}"


def within(fleet: Fleet, platform: int, key: str, survivors: Sequence[int]) -> npt.NDArray[np.bool_] | None:
    """The nodes a pod set that *requires* topology level ``key`` may be repaired onto: those of the domain (or the
    group at that level) holding most of the survivors. None when the level does not narrow anything (the node
    level, or a key this fleet lacks: the planner already said so when the gang was first placed)."""
    level = fleet.levels.level_of(key, fleet.platforms[platform])
    return None if level is None else within_level(fleet, level, survivors)


def within_level(fleet: Fleet, level: int, survivors: Sequence[int]) -> npt.NDArray[np.bool_] | None:
    """``within`` for a planner level (``gang.DOMAIN`` or above; None below, or without survivors)."""
    if not len(survivors) or level < gang.DOMAIN:
        return None
    held = fleet.node_domain[np.asarray(survivors, dtype=np.int64)]
    if level == gang.DOMAIN:
        home = np.bincount(held).argmax()
        mask: npt.NDArray[np.bool_] = fleet.node_domain == home
        return mask
    row = fleet.domain_group[level - gang.UP]
    groups = row[held]
    groups = groups[groups >= 0]
    if not len(groups):
        return None
    mask = row[fleet.node_domain] == np.bincount(groups).argmax()
    return mask
