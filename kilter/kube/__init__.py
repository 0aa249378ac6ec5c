"""Talking to a real API server: the HTTP client, protobuf lists, leader election, lease following, Events."""

from kilter.kube import api, events, follower, leader, protobuf
from kilter.kube.api import ApiError, ApiServer, connect

__all__ = ["ApiError", "ApiServer", "api", "connect", "events", "follower", "leader", "protobuf"]
