"""This region's inventory, made from the state kilter already keeps: the gang inventory and Kueue's quota.

The rooms are ``gangs.inventory``'s (what ``kilter.v1.Placement/Inventory``
answers), the headroom per ClusterQueue is Kueue's ``available`` for the GPU
resources (summed over flavors, what the queue could still admit now with
what it may borrow), and each LocalQueue is named with its ClusterQueue,
since a MultiKueue copy keeps its LocalQueue's name in every worker. A new
generation is published only when any of that changed, so a quiet region
costs its peers nothing but digests.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TypeVar

from kilter.gangs import inventory as gang_inventory
from kilter.model.errors import KilterError
from kilter.pool import bounds, wire
from kilter.pool.exchange import UNCHANGED, Unchanged
from kilter.pool.inventory import DomainRoom, RegionInventory, of_inventory
from kilter.pool.peers import PeerTable
from kilter.pool.wire import MAX_NAME, MAX_QUEUE_KEY
from kilter.quota import amount
from kilter.quota.available import available
from kilter.quota.status import apply_usage
from kilter.quota.tree import build_tree
from kilter.quota.usage import Ledger, workload_infos
from kilter.state.cluster import ClusterState
from kilter.state.store import ClusterStore

__all__ = ["StorePublisher", "gpu_headroom", "local_queue_names", "publishable"]

log = logging.getLogger("kilter.pool")

_V = TypeVar("_V")

MAX_HEADROOM = 1 << 20  # what "Unlimited" is published as: more GPUs than any region has


def gpu_headroom(state: ClusterState) -> dict[str, int]:
    """Per ClusterQueue, the most GPUs one gang could still get now: the largest ``available`` of any one flavor
    of any one device resource (a gang is admitted in one flavor of one resource); queues whose tree Kueue would
    refuse publish nothing. (A queue with both NVIDIA and AMD quota publishes the larger; the region's Kueue
    has the last word.)"""
    devices = state.catalog.device_resources
    tree = build_tree(state.cluster_queues, state.cohorts)
    if any(not p.cycle for p in tree.problems):
        return {}
    infos = workload_infos(state.workloads, state.local_queues, state.priority_classes)
    apply_usage(tree, Ledger(infos, sorted(tree.cluster_queues)).per_cluster_queue())
    out: dict[str, int] = {}
    for name, node in sorted(tree.cluster_queues.items()):
        free = [available(node, fr) for fr in node.quotas if fr[1] in devices]
        if free:
            out[name] = max(MAX_HEADROOM if amount.is_unlimited(f) else max(0, min(f, MAX_HEADROOM)) for f in free)
    return out


def local_queue_names(state: ClusterState) -> dict[str, str]:
    """LocalQueue ``NAMESPACE/NAME`` -> the ClusterQueue it feeds."""
    return {
        f"{lq.metadata.namespace}/{lq.metadata.name}": lq.spec.cluster_queue
        for lq in state.local_queues
        if lq.spec.cluster_queue
    }


class StorePublisher:
    """``Gossip``'s publisher over a ``ClusterStore``: a new inventory when the rooms, headroom or queues differ
    from the last one published, ``UNCHANGED`` when they do not. The state is read again only when the store
    changed or ``recheck_s`` passed (bindings kilter assumes change the rooms without a store event), so a quiet
    region costs its event loop nothing between rounds."""

    def __init__(self, store: ClusterStore, *, recheck_s: float = 5.0) -> None:
        self.store = store
        self.recheck_s = recheck_s
        self.failures = 0
        self.trimmed = 0  # inventories cut to the pool's bounds (a region past what they were sized for)
        self._read: tuple[int, float] | None = None  # (store version, time) of the last read

    def __call__(self, table: PeerTable, now: float) -> RegionInventory | Unchanged | None:
        if not self.store.ready:
            return None
        last = table.held.get(table.region)
        if last is not None and self._read is not None:
            version, at = self._read
            if version == self.store.version and now - at < self.recheck_s:
                return UNCHANGED
        try:
            taken = gang_inventory.take(self.store)
            state = self.store.state()
            headroom, queues = gpu_headroom(state), local_queue_names(state)
        except KilterError:
            self.failures += 1  # a state that cannot be read now: the last inventory ages out, never renewed
            self._read = None
            return None
        self._read = (self.store.version, now)
        whole = of_inventory(table.region, table.next_generation(now), now, taken, headroom, queues)
        made = publishable(whole)
        if made is not whole:
            self.trimmed += 1
            (log.warning if self.trimmed == 1 else log.debug)(
                "this region's inventory is past the pool's bounds: %d of %d domains, %d of %d ClusterQueues and "
                "%d of %d LocalQueues published (docs/pool.md, Bounds)",
                *(len(made.domains), len(whole.domains), len(made.headroom), len(whole.headroom)),
                *(len(made.local_queues), len(whole.local_queues)),
            )
        if last is not None and _same(last, made):
            return UNCHANGED
        return made


def publishable(inv: RegionInventory) -> RegionInventory:
    """``inv`` within what a peer takes (``wire``'s names, ``bounds``' counts and bytes; ``inv`` itself when it
    is): past them every exchange carrying it would be refused, where what is left out only goes unserved by
    the pool. Past a count, the largest rooms stay (ranking fills those first) and the first queues by name."""
    rooms = _within_bounds(tuple(r for r in inv.domains if 0 < len(r.platform) <= MAX_NAME))
    headroom = _first({q: n for q, n in inv.headroom.items() if 0 < len(q) <= MAX_NAME}, bounds.MAX_CLUSTER_QUEUES)
    queues = _first(
        {lq: cq for lq, cq in inv.local_queues.items() if 0 < len(lq) <= MAX_QUEUE_KEY and 0 < len(cq) <= MAX_NAME},
        bounds.MAX_LOCAL_QUEUES,
    )
    while True:
        out = RegionInventory(inv.origin, inv.generation, inv.produced_at, rooms, headroom, queues)
        size = len(wire.body(out))
        if size <= bounds.MAX_INVENTORY_BYTES:
            break
        keep = bounds.MAX_INVENTORY_BYTES / size * 0.9  # only with names near their limits by the thousand
        queues = _first(queues, int(len(queues) * keep))
        headroom = _first(headroom, int(len(headroom) * keep))
        rooms = _within_bounds(rooms, most_rooms=int(len(set(rooms)) * keep))
    same = rooms == inv.domains and _eq(headroom, inv.headroom) and _eq(queues, inv.local_queues)
    return inv if same else out


def _first(items: Mapping[str, _V], n: int) -> dict[str, _V]:
    return dict(items) if len(items) <= n else dict(sorted(items.items())[:n])


def _within_bounds(rooms: tuple[DomainRoom, ...], *, most_rooms: int = bounds.MAX_ROOMS) -> tuple[DomainRoom, ...]:
    """``rooms`` if within ``bounds.MAX_DOMAINS`` domains of at most ``most_rooms`` distinct rooms; else the
    largest rooms (most free GPUs) that are."""
    if len(rooms) <= bounds.MAX_DOMAINS and len(set(rooms)) <= most_rooms:
        return rooms
    kept: list[DomainRoom] = []
    seen: set[DomainRoom] = set()
    for room in sorted(rooms, key=lambda r: (-r.gpus_free, r.platform, -r.largest_gpus_per_pod, -r.largest_pods)):
        if len(kept) == bounds.MAX_DOMAINS:
            break
        if room in seen or len(seen) < most_rooms:
            seen.add(room)
            kept.append(room)
    return tuple(kept)


def _same(a: RegionInventory, b: RegionInventory) -> bool:
    return a.domains == b.domains and _eq(a.headroom, b.headroom) and _eq(a.local_queues, b.local_queues)


def _eq(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    return dict(a) == dict(b)
