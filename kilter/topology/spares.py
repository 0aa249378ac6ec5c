"""Spare nodes: per scale-up domain, healthy idle nodes that new gang plans leave alone so repairs find room in place.

A gang that loses a tray mid-run recovers fastest on a healthy node of the
same NVLink domain (its collectives stay on NVLink). If new plans may take
every free node, such a node is rarely there. ``Fleet.spare_nodes`` says, per
domain, how many nodes to keep back (``spare_settings`` fills it from the
``kilter.dev/spare-nodes-per-domain`` settings); this module says which.

**Which nodes.** In a domain that asks for N, the spares are the N
highest-indexed nodes (name order within the domain) among its *healthy,
wholly free* nodes; a domain with fewer such nodes holds what it has. The
planner fills a domain from its lowest-indexed nodes up and ranks follow node
index, so keeping the top end back leaves the low end contiguous for gangs,
and the choice needs no memory: the same fleet always gives the same spares.
When a repair (or anything else) takes a spare, the next wholly free node
below it becomes a spare, so new plans keep out of N nodes whenever N are
free. A partly used node is never a spare: it cannot take a whole-node pod.

Spares are kept only in domains of multi-node platforms: a domain of one
node (an 8-GPU server, or a tray detached from its rack because GPU Feature
Discovery dropped its clique label) has no neighbours to repair into, and
holding it would only hold the platform idle.

**Counts** (``tally``), per domain with N asked and ``healthy`` healthy nodes:
``held`` spares kept now; ``used = min(N, healthy) - held``, spare places
that busy nodes fill (new plans never take a spare, so under kilter these are
repairs, plus pods kilter did not place and pods bound before the setting);
``short = N - min(N, healthy)``, spare places the domain lacks healthy nodes
for. ``held + used + short = N``.

The mask is recomputed per plan from the bitmap's node arrays (a few numpy
passes over the nodes: tens of µs at 5,004 nodes, ``bench/spares.py``),
because every booking and release moves it.

**Lent spares.** A domain whose settings say ``kilter.dev/spares-for-preemptible:
"true"`` (``Fleet.spares_lent``) lends its spares to pods that a repair there
may preempt: pods of lower priority than every gang running in the domain
(``lent_to``; a domain no gang runs in lends to nobody). For such a pod the
domain holds no spares (``lent_to`` is passed to ``held_mask``,
``usable_mask`` and ``is_spare``); a repair that finds no free node in place
takes one back by preempting pods below its gang's priority
(``topology.repair``'s ``reclaim`` rung). The spares themselves are still the
same nodes: a borrowed node is busy, so it counts as *used*.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter._native import domains
from kilter.model.annotations import SPARE_NODES_PER_DOMAIN
from kilter.topology.fleet import Fleet

__all__ = [
    "NO_GANG",
    "PlatformSpares",
    "SpareCounts",
    "assign",
    "by_platform",
    "eligible_domains",
    "held_count",
    "held_mask",
    "is_spare",
    "lent_to",
    "note",
    "spare_once_free",
    "tally",
    "usable_mask",
]


NO_GANG = np.iinfo(np.int64).max
"""A domain's priority floor (``lent_to``) when no gang pod is bound there: it lends to nobody."""


@dataclass(frozen=True)
class SpareCounts:
    """Per domain (fleet domain order): spare nodes asked for, held now, filled by busy nodes, lacking nodes."""

    wanted: npt.NDArray[np.int32]
    held: npt.NDArray[np.int32]
    used: npt.NDArray[np.int32]
    short: npt.NDArray[np.int32]


def eligible_domains(fleet: Fleet) -> npt.NDArray[np.bool_]:
    """Per domain, whether it may keep spares: a domain of a multi-node platform, not a detached node."""
    bm = fleet.bitmap
    multi = np.array([p.is_multi_node for p in fleet.platforms], dtype=bool)
    if not len(multi):
        return np.zeros(len(fleet.domain_ids), dtype=bool)
    detached = (bm.domain_flags & domains.DETACHED) != 0
    return multi[bm.domain_platforms] & ~detached  # type: ignore[no-any-return]


def assign(fleet: Fleet, wanted: npt.ArrayLike, lent: npt.ArrayLike | None = None) -> None:
    """Set the fleet's spare counts per domain (0 where a domain may keep none, ``eligible_domains``), and which
    domains lend theirs to preemptible pods (``lent``, per domain; None: none)."""
    per_domain = np.asarray(wanted, dtype=np.int64)
    if per_domain.shape != (len(fleet.domain_ids),):
        raise ValueError(f"spare counts need one entry per domain ({len(fleet.domain_ids)})")
    out = np.where(eligible_domains(fleet), np.clip(per_domain, 0, 2**31 - 1), 0).astype(np.int32)
    out.flags.writeable = False
    fleet.spare_nodes = out if out.any() else None
    lends = np.zeros(len(fleet.domain_ids), dtype=bool) if lent is None else np.asarray(lent, dtype=bool)
    if lends.shape != (len(fleet.domain_ids),):
        raise ValueError(f"spare lending needs one entry per domain ({len(fleet.domain_ids)})")
    lends = lends & (out > 0)
    lends.flags.writeable = False
    fleet.spares_lent = lends if lends.any() else None


def lent_to(fleet: Fleet, priority: int, floor: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_] | None:
    """Per domain, whether its spares are lent to a pod of ``priority``: the domain lends them
    (``Fleet.spares_lent``), a gang runs there and every gang running there has a higher priority (``floor``: per
    domain, the lowest priority of a gang pod bound there; ``NO_GANG`` where none is); None when no domain lends
    to it. A domain no gang runs in lends to nobody: a gang planned there later could not take its spares back
    from a pod of its own priority or more, and a new gang of any priority could take them for itself."""
    lent = fleet.spares_lent
    if lent is None:
        return None
    out = lent & (floor > priority) & (floor != NO_GANG)
    return out if out.any() else None


def held_mask(fleet: Fleet, *, lent: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.bool_] | None:
    """Per node, whether it is a spare now, held from the pod asking; None when no domain keeps any (nothing to
    hold out). ``lent``: per domain, spares lent to that pod (``lent_to``), which it is not held from."""
    wanted = fleet.spare_nodes
    if wanted is None or fleet.n_nodes == 0:
        return None
    bm = fleet.bitmap
    idle = bm.node_used_gpus == 0
    idle &= bm.node_usable_flags != 0
    # Idle nodes at or after each node, fleet-wide; a node is a spare when that count, less the idle nodes of the
    # domains after its own, is at most its domain's N: one threshold per domain, one gather per node.
    at_or_after = np.cumsum(idle[::-1], dtype=np.int32)[::-1]
    threshold = np.append(at_or_after, 0)[bm.domain_node_start[1:]] + wanted
    idle &= at_or_after <= threshold[fleet.node_domain]
    if lent is not None:
        idle &= ~lent[fleet.node_domain]
    return idle  # type: ignore[no-any-return]


def is_spare(fleet: Fleet, node: int, *, lent: npt.NDArray[np.bool_] | None = None) -> bool:
    """Whether node ``node`` (a fleet index; -1: none) is a spare now held from the pod asking:
    ``held_mask(fleet, lent=lent)[node]`` from its own domain alone, for callers that ask about one node at a time
    (Volcano's predicate)."""
    found = _from_node(fleet, node, lent)
    return found is not None and bool(found[1][0]) and int(np.count_nonzero(found[1])) <= found[0]


def spare_once_free(fleet: Fleet, node: int, *, lent: npt.NDArray[np.bool_] | None = None) -> bool:
    """Whether node ``node`` would be a spare held from the asking pod if it were wholly free (its pods evicted):
    what a lone pod's preemption must not free, since the pod could not use the node afterwards."""
    found = _from_node(fleet, node, lent)
    usable = found is not None and bool(fleet.bitmap.node_usable_flags[node])
    return found is not None and usable and int(np.count_nonzero(found[1][1:])) < found[0]


def _from_node(fleet: Fleet, node: int, lent: npt.NDArray[np.bool_] | None) -> tuple[int, npt.NDArray[np.bool_]] | None:
    """For a node whose domain holds spares from the asking pod: the domain's N, and whether each node of the
    domain from ``node`` on is idle and healthy (the nodes a spare is counted among); None otherwise."""
    wanted = fleet.spare_nodes
    if wanted is None or node < 0:
        return None
    domain = int(fleet.node_domain[node])
    count = int(wanted[domain])
    if count == 0 or (lent is not None and lent[domain]):
        return None
    bm = fleet.bitmap
    end = int(bm.domain_node_start[domain + 1])
    return count, (bm.node_used_gpus[node:end] == 0) & (bm.node_usable_flags[node:end] != 0)


def usable_mask(
    fleet: Fleet, node_ok: npt.NDArray[np.uint8] | None, *, lent: npt.NDArray[np.bool_] | None = None
) -> npt.NDArray[np.uint8] | None:
    """``node_ok`` (the planner's eligible nodes, None = all) with the spares held from the asking pod taken out."""
    held = held_mask(fleet, lent=lent)
    if held is None or not held.any():
        return node_ok
    ok = ~held if node_ok is None else (node_ok != 0) & ~held
    return np.ascontiguousarray(ok, dtype=np.uint8)


def held_count(fleet: Fleet, *, lent: npt.NDArray[np.bool_] | None = None) -> int:
    """How many nodes are spares now (held from the asking pod: ``held_mask``)."""
    held = held_mask(fleet, lent=lent)
    return 0 if held is None else int(held.sum())


def tally(fleet: Fleet) -> SpareCounts:
    """Per domain: spares asked for, held, used and short (module docstring), all zero where none is asked."""
    n = len(fleet.domain_ids)
    wanted = fleet.spare_nodes
    if wanted is None or n == 0:
        zero = np.zeros(n, dtype=np.int32)
        return SpareCounts(zero, zero, zero, zero)
    bm = fleet.bitmap
    held_nodes = held_mask(fleet)
    assert held_nodes is not None
    held = np.bincount(fleet.node_domain[held_nodes], minlength=n).astype(np.int32)
    healthy = np.add.reduceat((bm.node_usable_flags != 0).astype(np.int32), bm.domain_node_start[:-1])
    healthy = np.where(np.diff(bm.domain_node_start) > 0, healthy, 0)  # reduceat of an empty range repeats a node
    reachable = np.minimum(wanted, healthy).astype(np.int32)
    return SpareCounts(wanted.astype(np.int32), held, reachable - held, (wanted - reachable).astype(np.int32))


@dataclass(frozen=True)
class PlatformSpares:
    """One platform's spare counts summed over its domains that ask for spares (``domains`` of them)."""

    platform: str
    domains: int
    wanted: int
    held: int
    used: int
    short: int
    lent: int = 0  # of ``domains``, those lending their spares to preemptible pods


def by_platform(fleet: Fleet, counts: SpareCounts | None = None) -> list[PlatformSpares]:
    """Per platform (fleet order) with a domain asking for spares, the sums of ``tally``; [] when none asks."""
    counts = counts or tally(fleet)
    asking = counts.wanted > 0
    plat = fleet.bitmap.domain_platforms
    out = []
    for i, p in enumerate(fleet.platforms):
        sel = asking & (plat == i)
        if sel.any():
            wanted, held, used, short = (
                int(a[sel].sum()) for a in (counts.wanted, counts.held, counts.used, counts.short)
            )
            lent = int((fleet.spares_lent & sel).sum()) if fleet.spares_lent is not None else 0
            out.append(PlatformSpares(p.name, int(sel.sum()), wanted, held, used, short, lent))
    return out


def note(fleet: Fleet, *, lent: npt.NDArray[np.bool_] | None = None) -> str:
    """A clause for the reason of a plan that does not fit, when spares were held out of it (``lent``: those
    lent to the asking pod were not); "" when none were."""
    held = held_count(fleet, lent=lent)
    if not held:
        return ""
    return f"{held} spare node{'s' if held != 1 else ''} kept out of new plans ({SPARE_NODES_PER_DOMAIN})"
