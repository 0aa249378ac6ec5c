"""The cluster-state cache: objects fed as watch events (a snapshot file now, a live cluster later) and the fleet."""

from kilter.state import api, cluster, feed, snapshot, store
from kilter.state.cluster import ClusterState, from_objects, load
from kilter.state.store import ClusterStore, Event

__all__ = [
    "ClusterState",
    "ClusterStore",
    "Event",
    "api",
    "cluster",
    "feed",
    "from_objects",
    "load",
    "snapshot",
    "store",
]
