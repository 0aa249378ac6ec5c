"""The cluster-state cache: objects fed as watch events (a snapshot file or a live cluster) and the fleet."""

from kilter.state import api, cluster, events, feed, follower, leader, live, protobuf, reflector, snapshot, store
from kilter.state.cluster import ClusterState, from_objects, load
from kilter.state.store import ClusterStore, Event

__all__ = [
    "ClusterState",
    "ClusterStore",
    "Event",
    "api",
    "cluster",
    "events",
    "feed",
    "follower",
    "from_objects",
    "leader",
    "live",
    "load",
    "protobuf",
    "reflector",
    "snapshot",
    "store",
]
