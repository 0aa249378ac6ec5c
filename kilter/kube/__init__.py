"""Talking to a real API server: the HTTP client, protobuf lists, leader election, lease following, Events,
evictions, and what a field manager owns of an object."""

from kilter.kube import api, events, evict, follower, leader, owned, protobuf
from kilter.kube.api import ApiError, ApiServer, connect

__all__ = ["ApiError", "ApiServer", "api", "connect", "events", "evict", "follower", "leader", "owned", "protobuf"]
