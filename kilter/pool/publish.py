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

from collections.abc import Mapping

from kilter.gangs import inventory as gang_inventory
from kilter.model.errors import KilterError
from kilter.pool.inventory import RegionInventory, of_inventory
from kilter.pool.peers import PeerTable
from kilter.quota import amount
from kilter.quota.available import available
from kilter.quota.status import apply_usage
from kilter.quota.tree import build_tree
from kilter.quota.usage import Ledger, workload_infos
from kilter.state.cluster import ClusterState
from kilter.state.store import ClusterStore

__all__ = ["StorePublisher", "gpu_headroom", "local_queue_names"]

MAX_HEADROOM = 1 << 20  # what "Unlimited" is published as: more GPUs than any region has


def gpu_headroom(state: ClusterState) -> dict[str, int]:
    """Per ClusterQueue, the GPUs of each device resource it could still admit now, the largest (a gang asks for
    one device resource); queues whose tree Kueue would refuse publish nothing."""
    devices = state.catalog.device_resources
    tree = build_tree(state.cluster_queues, state.cohorts)
    if tree.problems:
        return {}
    infos = workload_infos(state.workloads, state.local_queues, state.priority_classes)
    apply_usage(tree, Ledger(infos, sorted(tree.cluster_queues)).per_cluster_queue())
    out: dict[str, int] = {}
    for name, node in sorted(tree.cluster_queues.items()):
        per_resource: dict[str, int] = {}
        for fr in node.quotas:
            if fr[1] in devices:
                free = available(node, fr)
                free = MAX_HEADROOM if amount.is_unlimited(free) else max(0, min(free, MAX_HEADROOM))
                per_resource[fr[1]] = min(MAX_HEADROOM, per_resource.get(fr[1], 0) + free)
        if per_resource:
            out[name] = max(per_resource.values())
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
    from the last one published."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self.failures = 0

    def __call__(self, table: PeerTable, now: float) -> RegionInventory | None:
        if not self.store.ready:
            return None
        try:
            taken = gang_inventory.take(self.store)
            state = self.store.state()
            headroom, queues = gpu_headroom(state), local_queue_names(state)
        except KilterError:
            self.failures += 1  # a state that cannot be read now: the last inventory stands until it ages out
            return None
        made = of_inventory(table.region, table.next_generation(now), now, taken, headroom, queues)
        last = table.held.get(table.region)
        if last is not None and _same(last, made):
            return None
        return made


def _same(a: RegionInventory, b: RegionInventory) -> bool:
    return a.domains == b.domains and _eq(a.headroom, b.headroom) and _eq(a.local_queues, b.local_queues)


def _eq(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    return dict(a) == dict(b)
