"""The watch-event vocabulary every feeder speaks and the store applies: event types, object keys, events.

A snapshot file, a list/watch reflector and the tests all hand the store
``Event``s keyed by ``object_key``, so what counts as "the same object" is
decided here once: (API group, kind, namespace, name), as the API server's
own storage keys it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from msgspec import structs

from kilter.model import codec
from kilter.model.core_v1 import Node, Pod
from kilter.model.errors import InputError

__all__ = [
    "ADDED",
    "DELETED",
    "MODIFIED",
    "TYPED_KINDS",
    "Event",
    "EventType",
    "ObjectKey",
    "Stored",
    "Typed",
    "object_key",
    "same_view",
    "typed_view",
    "where",
]

ADDED: Literal["ADDED"] = "ADDED"
MODIFIED: Literal["MODIFIED"] = "MODIFIED"
DELETED: Literal["DELETED"] = "DELETED"
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
ObjectKey = tuple[str, str, str, str]  # (API group, kind, namespace, name)
Typed = Node | Pod
Stored = Mapping[str, Any] | Typed
TYPED_KINDS: dict[tuple[str, str], type[Typed]] = {("", "Node"): Node, ("", "Pod"): Pod}
"""The kinds the store keeps typed from the moment they arrive; every other kind is kept as received."""


class Event(NamedTuple):
    """One watch event: what happened to which object (as the API returns it, or already typed for Nodes and Pods)."""

    type: EventType
    object: Stored


def object_key(obj: Stored) -> ObjectKey:
    if isinstance(obj, Node | Pod):
        return "", obj.kind, obj.metadata.namespace, obj.metadata.name
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    meta = obj.get("metadata")
    if not isinstance(api_version, str) or not isinstance(kind, str) or not isinstance(meta, Mapping):
        raise InputError("an object needs apiVersion, kind and metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(f"{kind} without metadata.name")
    namespace = meta.get("namespace") or ""
    return api_version.rpartition("/")[0], kind, str(namespace), name


def where(key: ObjectKey) -> str:
    """How a message names the object: ``Kind namespace/name``, or ``Kind name`` for a cluster-scoped one."""
    return f"{key[1]} {key[2]}/{key[3]}" if key[2] else f"{key[1]} {key[3]}"


def typed_view(key: ObjectKey, obj: Stored) -> Stored:
    """Nodes and Pods as the store keeps them (typed); the other kinds as they are."""
    cls = TYPED_KINDS.get(key[:2])
    if cls is None or isinstance(obj, cls):
        return obj
    return codec.convert(obj, cls, path=where(key))


def same_view(old: Stored, new: Stored) -> bool:
    """Nothing kilter reads changed. A typed view holds only what kilter reads, so a new resourceVersion alone
    (a kubelet's heartbeat, a status condition kilter skips) is no change: no rebuild, no new version."""
    if old == new:
        return True
    if isinstance(new, Node | Pod) and type(old) is type(new):
        version = new.metadata.resource_version
        return structs.replace(old, metadata=structs.replace(old.metadata, resource_version=version)) == new
    return False
