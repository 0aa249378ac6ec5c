"""Talking to a real API server: the HTTP client, where it is and whose credentials (kept fresh), protobuf lists,
leader election, lease following, Events, evictions, and what a field manager owns of an object."""

from kilter.kube import (
    api,
    credentials,
    events,
    evict,
    exec_credential,
    follower,
    kubeconfig,
    leader,
    owned,
    protobuf,
)
from kilter.kube.api import ApiError, ApiServer, connect

__all__ = [
    "ApiError",
    "ApiServer",
    "api",
    "connect",
    "credentials",
    "events",
    "evict",
    "exec_credential",
    "follower",
    "kubeconfig",
    "leader",
    "owned",
    "protobuf",
]
