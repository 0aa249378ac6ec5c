"""What each scale-up domain holds now: health, free GPUs, the largest gang it takes, and whose gangs run there.

One answer for the people on call (``kubectl kilter domains``) and for
programs (the gRPC ``Inventory``, what regional peers exchange), so both read
this and neither counts on its own. Everything comes from the fleet's arrays
in one pass per domain, plus one pass over the bound pods for the gangs: at
5,004 nodes and 150,000 pods a view must answer in well under a second.

A domain's *largest gang shape* is the most pods of one size it could take
right now, tried from whole nodes down (a GB200 tray: 4 GPUs, then 2, then
1): a platform engineer asks "does rack 7 take an 18-node job?", and a
whole-node answer says so directly. ``trays`` gives one cell per node for a
rack map. Spare nodes (``kilter.topology.spares``) are their own count and
cell state: ``spares`` the nodes a domain keeps out of new plans now (cell
"spare"), ``spares_used`` the spare places busy nodes fill (repairs, mostly).
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

import numpy as np

from kilter._native import domains as native_domains
from kilter.gangs.identity import key_of
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError
from kilter.state.store import Booking, ClusterStore
from kilter.topology import rooms, spares
from kilter.topology.fleet import Fleet

__all__ = [
    "TRAY_STATES",
    "DomainInventory",
    "GangOnDomain",
    "Inventory",
    "PlatformInventory",
    "TrayState",
    "booked_gang_pods",
    "take",
]

TrayState = Literal["free", "partial", "busy", "failed", "spare"]
TRAY_STATES: tuple[TrayState, ...] = ("free", "partial", "busy", "failed", "spare")


@dataclass(frozen=True)
class GangOnDomain:
    """A gang with pods bound in a domain: its key (``GangKey.format``), those pods and their GPUs."""

    key: str
    pods: int
    gpus: int


@dataclass(frozen=True)
class DomainInventory:
    """One scale-up domain now. ``block`` is the group just above it (its full path), "" where none is known;
    ``detached``: a node of a multi-node platform that lost its domain label (GPU Feature Discovery drops it when
    the fabric is unhealthy), a domain of its own that only single-pod gangs use."""

    domain: str
    detached: bool
    platform: str
    block: str
    nodes_healthy: int
    nodes_total: int
    gpus_free: int
    gpus_total: int
    spares: int
    largest_pods: int
    largest_gpus_per_pod: int
    gangs: tuple[GangOnDomain, ...]
    trays: tuple[TrayState, ...]
    spares_used: int = 0


@dataclass(frozen=True)
class PlatformInventory:
    """One platform's totals; ``free_histogram[g]`` counts its domains with exactly ``g`` free GPUs."""

    platform: str
    domains: int
    nodes_healthy: int
    nodes_total: int
    gpus_free: int
    gpus_total: int
    free_histogram: tuple[int, ...]


@dataclass(frozen=True)
class Inventory:
    """The fleet's domains and platforms as of ``generation`` (``ClusterStore.generation``: a peer that holds the
    same number holds the same answer)."""

    generation: int
    platforms: tuple[PlatformInventory, ...]
    domains: tuple[DomainInventory, ...]


def take(store: ClusterStore, *, platform: str | None = None, block: str | None = None) -> Inventory:
    """The inventory of ``store``'s fleet, only ``platform``'s domains (a catalog name or alias) and only those
    under ``block`` (a block's path, or a coarser prefix of it) when given.

    ``InputError`` for a platform the catalog does not know; a known platform the fleet lacks, or a block
    nothing is under, is an empty answer, not an error.
    """
    fleet = store.fleet()
    generation = store.generation
    wanted = store.catalog.get(platform).name if platform is not None else None
    if block is not None and not block.strip("/"):
        raise InputError("block must name a block (its path, e.g. spine-1/block-3), got an empty value")
    gangs = _gangs_by_domain(store, fleet)
    rows = _domain_rows(fleet, gangs, wanted, block.strip("/") if block is not None else None, _memo_of(store, fleet))
    return Inventory(generation, _platform_rows(fleet, rows), tuple(rows))


@dataclass
class _RowMemo:
    """Each domain's last row and what it was built from (its nodes' GPUs, use, health and spare marks, its spare
    counts and gangs): a peer polling a busy cluster's inventory sees a few domains change between calls, and the
    rest are given again as the same objects (``api.messages`` keeps their messages too)."""

    fleet: Fleet
    rows: dict[int, tuple[object, DomainInventory]]


_MEMOS: weakref.WeakKeyDictionary[ClusterStore, _RowMemo] = weakref.WeakKeyDictionary()


def _memo_of(store: ClusterStore, fleet: Fleet) -> _RowMemo:
    memo = _MEMOS.get(store)
    if memo is None or memo.fleet is not fleet:
        memo = _MEMOS[store] = _RowMemo(fleet, {})
    return memo


def _block_of(fleet: Fleet, domain: int) -> str:
    if fleet.bitmap.n_levels == 0:
        return ""
    group = int(fleet.domain_group[0, domain])
    return fleet.group_ids[0][group] if group >= 0 else ""


def _under(block_path: str, wanted: str) -> bool:
    return block_path == wanted or block_path.startswith(wanted + "/")


def _domain_rows(
    fleet: Fleet,
    gangs: dict[int, list[GangOnDomain]],
    platform: str | None,
    block: str | None,
    memo: _RowMemo | None = None,
) -> list[DomainInventory]:
    """The rows, every count taken for all domains at once over the node arrays (``reduceat`` by domain); a
    domain whose inputs equal those of its row in ``memo`` gets that row again."""
    bm = fleet.bitmap
    starts = bm.domain_node_start
    if len(fleet.domain_ids) == 0:
        return []
    counts = bm.node_gpu_counts
    usable = bm.node_usable_flags != 0
    free = np.where(usable, counts - bm.node_used_gpus, 0)
    at = starts[:-1]
    healthy = np.add.reduceat(usable.astype(np.int32), at).tolist()
    free_sum = np.add.reduceat(free, at).tolist()
    total = np.add.reduceat(counts, at).tolist()
    plat_of = bm.domain_platforms
    shapes = rooms.largest_shapes(fleet, free)
    detached = ((bm.domain_flags & native_domains.DETACHED) != 0).tolist()
    held = spares.held_mask(fleet)
    is_spare = held if held is not None else np.zeros(len(usable), dtype=bool)
    cells = np.select([is_spare, ~usable, free == counts, free == 0], [4, 3, 0, 2], default=1).tolist()  # TRAY_STATES
    spare_counts = spares.tally(fleet)
    spares_held, spares_used = spare_counts.held.tolist(), spare_counts.used.tolist()
    bounds = starts.tolist()
    tray_states: list[TrayState] | None = None
    per_node = np.stack([counts, bm.node_used_gpus, usable.astype(np.int32), is_spare.astype(np.int32)], axis=1)
    node_bytes, width = per_node.astype(np.int32).tobytes(), 16
    rows: list[DomainInventory] = []
    for d, domain_id in enumerate(fleet.domain_ids):
        plat = fleet.platforms[int(plat_of[d])]
        if platform is not None and plat.name != platform:
            continue
        path = _block_of(fleet, d)
        if block is not None and not _under(path, block):
            continue
        lo, hi = bounds[d], bounds[d + 1]
        on = tuple(sorted(gangs.get(d, ()), key=lambda g: (-g.gpus, g.key)))
        inputs = (node_bytes[lo * width : hi * width], spares_held[d], spares_used[d], on)
        if memo is not None:
            last = memo.rows.get(d)
            if last is not None and last[0] == inputs:
                rows.append(last[1])
                continue
        if tray_states is None:
            tray_states = [TRAY_STATES[c] for c in cells]
        pods, size = shapes[d]
        row = DomainInventory(
            domain=domain_id,
            detached=detached[d],
            platform=plat.name,
            block=path,
            nodes_healthy=healthy[d],
            nodes_total=hi - lo,
            gpus_free=free_sum[d],
            gpus_total=total[d],
            spares=spares_held[d],
            largest_pods=pods,
            largest_gpus_per_pod=size,
            gangs=on,
            trays=tuple(tray_states[lo:hi]),
            spares_used=spares_used[d],
        )
        if memo is not None:
            memo.rows[d] = (inputs, row)
        rows.append(row)
    return rows


def _gangs_by_domain(store: ClusterStore, fleet: Fleet) -> dict[int, list[GangOnDomain]]:
    """Per domain index, the gangs whose pods the fleet holds GPUs for there (pods outside any gang are left
    out), counting the very GPUs the free columns leave out."""
    held: dict[int, dict[str, list[int]]] = defaultdict(dict)
    node_domain = fleet.node_domain.tolist()
    for key, _, booking in booked_gang_pods(store):
        tally = held[node_domain[booking.node]].setdefault(key, [0, 0])
        tally[0] += 1
        tally[1] += booking.gpus
    return {d: [GangOnDomain(k, p, g) for k, (p, g) in by_key.items()] for d, by_key in held.items()}


def booked_gang_pods(store: ClusterStore) -> list[tuple[str, Pod, Booking]]:
    """(gang key, pod, booking) of every pod of a gang the fleet holds GPUs for (after ``store.fleet()``).

    Read from the store's bookings, so a view of 150,000 pods walks only those holding GPUs; a pod the feed does
    not show yet (an assumed bind) has no labels to read and is left out. A pod's gang key is remembered per
    store while the pod object is the same one: a server asked for its inventory again and again reads a pod's
    labels once, not once a call.
    """
    known = _KEYS.get(store)
    if known is None:
        known = _KEYS[store] = {}
    out = []
    pod_of = store.pod
    read = 0
    for uid, booking in store.bookings():
        pod = pod_of(uid)
        if pod is None:
            continue
        read += 1
        seen = known.get(uid)
        if seen is None or seen[0] is not pod:
            found = key_of(pod)
            seen = known[uid] = (pod, found.format() if found is not None else None)
        if seen[1] is not None:
            out.append((seen[1], pod, booking))
    if len(known) > 2 * read + 1024:  # pods gone since: forget them, now and then rather than every call
        booked = {uid for uid, _ in store.bookings()}
        for uid in [u for u in known if u not in booked]:
            del known[uid]
    return out


_KEYS: weakref.WeakKeyDictionary[ClusterStore, dict[str, tuple[Pod, str | None]]] = weakref.WeakKeyDictionary()


def _platform_rows(fleet: Fleet, rows: list[DomainInventory]) -> tuple[PlatformInventory, ...]:
    by_platform: dict[str, list[DomainInventory]] = defaultdict(list)
    for row in rows:
        by_platform[row.platform].append(row)
    out = []
    for plat in fleet.platforms:
        mine = by_platform.get(plat.name)
        if not mine:
            continue
        top = max(max(r.gpus_total for r in mine), plat.gpus_per_domain)
        hist = np.bincount(np.asarray([r.gpus_free for r in mine], dtype=np.int64), minlength=top + 1)
        out.append(
            PlatformInventory(
                platform=plat.name,
                domains=len(mine),
                nodes_healthy=sum(r.nodes_healthy for r in mine),
                nodes_total=sum(r.nodes_total for r in mine),
                gpus_free=sum(r.gpus_free for r in mine),
                gpus_total=sum(r.gpus_total for r in mine),
                free_histogram=tuple(int(x) for x in hist),
            )
        )
    return tuple(out)
