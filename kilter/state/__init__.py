"""The cluster-state cache: one store, fed by a snapshot file or by list/watch reflectors, and the fleet."""

from kilter.state import (
    cluster,
    copies,
    events,
    feed,
    live,
    pod_index,
    reflector,
    reservations,
    snapshot,
    store,
    watchers,
)
from kilter.state.cluster import ClusterState, from_objects, load
from kilter.state.store import ClusterStore, Event

__all__ = [
    "ClusterState",
    "ClusterStore",
    "Event",
    "cluster",
    "copies",
    "events",
    "feed",
    "from_objects",
    "live",
    "load",
    "pod_index",
    "reflector",
    "reservations",
    "snapshot",
    "store",
    "watchers",
]
