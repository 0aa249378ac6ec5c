"""The cluster-state cache: objects from a snapshot (and later a live cluster) and the fleet built from them."""

from kilter.state import cluster, snapshot
from kilter.state.cluster import ClusterState, from_objects, load

__all__ = ["ClusterState", "cluster", "from_objects", "load", "snapshot"]
