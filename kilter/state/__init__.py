"""The cluster-state cache: one store, fed by a snapshot file or by list/watch reflectors, and the fleet."""

from kilter.state import cluster, feed, live, reflector, reservations, snapshot, store
from kilter.state.cluster import ClusterState, from_objects, load
from kilter.state.store import ClusterStore, Event

__all__ = [
    "ClusterState",
    "ClusterStore",
    "Event",
    "cluster",
    "feed",
    "from_objects",
    "live",
    "load",
    "reflector",
    "reservations",
    "snapshot",
    "store",
]
