"""The live cluster state: fed add/update/delete events, read by the servers.

Every feeder speaks Kubernetes watch events (``ADDED``, ``MODIFIED``,
``DELETED`` with the object): the snapshot feed diffs a file against what
it last loaded, and a list/watch feed of a live cluster produces the same
events. The store keeps raw objects by (group, kind, namespace, name) and
derives what the verbs read:

* the fleet model, rebuilt only when Nodes or Topologies change (a rebuild
  bumps ``generation``, so holders of plans know to re-check them);
* GPU bookings per pod UID, moved incrementally on Pod events — a bind or a
  finished pod must not cost a rebuild of the fleet;
* the typed ``ClusterState`` for everything else, built on demand per version.

A pod the scheduler has just bound but the feed has not shown yet is booked
as *assumed* (the scheduler's own assume cache does the same); the feed's
version replaces it, so GPUs are never counted twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kilter.model import codec
from kilter.model.core_v1 import Pod, pod_request
from kilter.model.errors import InputError
from kilter.state.cluster import KNOWN_KINDS, KUEUE, ClusterState, from_objects
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.fleet import ENDED_PHASES, Fleet, build_fleet

__all__ = ["ADDED", "DELETED", "MODIFIED", "ClusterStore", "Event", "ObjectKey", "object_key"]

ADDED: Literal["ADDED"] = "ADDED"
MODIFIED: Literal["MODIFIED"] = "MODIFIED"
DELETED: Literal["DELETED"] = "DELETED"
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
ObjectKey = tuple[str, str, str, str]  # (API group, kind, namespace, name)
_FLEET_KINDS = {("", "Node"), (KUEUE, "Topology"), ("topology.volcano.sh", "HyperNode")}


@dataclass(frozen=True)
class Event:
    """One watch event: what happened to which object (the object as the API returns it)."""

    type: EventType
    object: Mapping[str, Any]


def object_key(obj: Mapping[str, Any]) -> ObjectKey:
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


@dataclass(frozen=True)
class Booking:
    node: int
    gpus: int
    assumed: bool


class ClusterStore:
    def __init__(self, *, catalog: Catalog | None = None) -> None:
        self.catalog = catalog or Catalog(BUILTIN)
        self.objects: dict[ObjectKey, Mapping[str, Any]] = {}
        self.version = 0
        self.generation = 0
        self.ready = False
        self.ignored: dict[str, int] = {}
        self._fleet: Fleet | None = None
        self._fleet_dirty = True
        self._bookings: dict[str, Booking] = {}
        self._pods_by_uid: dict[str, Pod] = {}
        self._state: tuple[int, ClusterState] | None = None
        self._idle: tuple[int, Fleet] | None = None

    # ------------------------------------------------------------------ feeding

    def apply(self, events: Iterable[Event]) -> int:
        """Apply watch events in order; returns how many changed something."""
        changed = 0
        for event in events:
            if self._apply_one(event):
                changed += 1
        if changed:
            self.version += 1
        return changed

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> list[Event]:
        """Make the store hold exactly ``objects`` (a relist); returns the events that did it."""
        incoming: dict[ObjectKey, Mapping[str, Any]] = {}
        ignored: dict[str, int] = {}
        for obj in objects:
            key = object_key(obj)
            if key[:2] not in KNOWN_KINDS:
                ignored[f"{obj.get('apiVersion')}/{key[1]}"] = ignored.get(f"{obj.get('apiVersion')}/{key[1]}", 0) + 1
                continue
            incoming[key] = obj
        events = self._difference(incoming, lambda key: True)
        self.ignored = ignored
        self.apply(events)
        self.ready = True
        return events

    def replace_kind(self, group: str, kind: str, objects: Iterable[Mapping[str, Any]]) -> list[Event]:
        """Make the store hold exactly ``objects`` of one kind (a relist of one resource); the events that did it."""
        incoming = {object_key(obj): obj for obj in objects}
        events = self._difference(incoming, lambda key: key[:2] == (group, kind))
        self.apply(events)
        return events

    def _difference(
        self, incoming: Mapping[ObjectKey, Mapping[str, Any]], scope: Callable[[ObjectKey], bool]
    ) -> list[Event]:
        """The events that turn what the store holds within ``scope`` into ``incoming``."""
        events = [Event(DELETED, old) for key, old in self.objects.items() if scope(key) and key not in incoming]
        for key, obj in incoming.items():
            old = self.objects.get(key)
            if old is None:
                events.append(Event(ADDED, obj))
            elif old != obj:
                events.append(Event(MODIFIED, obj))
        return events

    def _apply_one(self, event: Event) -> bool:
        key = object_key(event.object)
        if key[:2] not in KNOWN_KINDS:
            return False
        old = self.objects.get(key)
        if event.type == DELETED:
            if old is None:
                return False
            del self.objects[key]
            obj: Mapping[str, Any] | None = None
        else:
            if old == event.object:
                return False
            self.objects[key] = event.object
            obj = event.object
        if key[:2] in _FLEET_KINDS:
            self._fleet_dirty = True
        elif key[:2] == ("", "Pod"):
            self._pod_changed(old, obj)
        return True

    # ------------------------------------------------------------------ pods and bookings

    def _pod_changed(self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        if old is not None:
            uid = _uid(old)
            self._pods_by_uid.pop(uid, None)
            if not self._fleet_dirty:
                self._unbook(uid)
        if new is None:
            return
        pod = codec.convert(new, Pod, path=f"Pod {_uid(new) or '?'}")
        uid = pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"
        self._pods_by_uid[uid] = pod
        if not self._fleet_dirty:
            self._unbook(uid)
            self._book_pod(uid, pod)

    def _book_pod(self, uid: str, pod: Pod) -> None:
        fleet = self._fleet
        if fleet is None or not pod.spec.node_name or pod.status.phase in ENDED_PHASES:
            return
        node = fleet.node_index.get(pod.spec.node_name)
        if node is None:
            return
        resource = fleet.platform_of_node(node).device_resource
        gpus = pod_request(pod.spec, resource, path=f"pod {pod.metadata.namespace}/{pod.metadata.name}: spec")
        gpus = min(gpus, fleet.bitmap.node_free_gpus(node))
        if gpus > 0:
            fleet.bitmap.allocate(node, gpus)
            self._bookings[uid] = Booking(node, gpus, assumed=False)

    def _unbook(self, uid: str) -> None:
        booking = self._bookings.pop(uid, None)
        if booking is not None and self._fleet is not None:
            self._fleet.bitmap.release(booking.node, booking.gpus)

    def assume(self, uid: str, node_name: str, gpus: int) -> None:
        """Book a pod the scheduler bound before the feed shows it bound (no-op if the feed already does)."""
        fleet = self.fleet()
        node = fleet.node_index.get(node_name)
        if node is None:
            raise InputError(f"node {node_name} is not a GPU node kilter knows")
        if uid in self._bookings or gpus <= 0:
            return
        gpus = min(gpus, fleet.bitmap.node_free_gpus(node))
        if gpus > 0:
            fleet.bitmap.allocate(node, gpus)
            self._bookings[uid] = Booking(node, gpus, assumed=True)

    def forget(self, uid: str) -> None:
        """Drop an assumed booking (the placement was taken back); what the feed shows bound stays."""
        booking = self._bookings.get(uid)
        if booking is not None and booking.assumed:
            self._unbook(uid)

    def booking(self, uid: str) -> Booking | None:
        return self._bookings.get(uid)

    def pod(self, uid: str) -> Pod | None:
        return self._pods_by_uid.get(uid)

    def pods(self) -> Iterator[Pod]:
        return iter(self._pods_by_uid.values())

    # ------------------------------------------------------------------ reading

    def fleet(self) -> Fleet:
        """The fleet model with every bound pod booked; rebuilt only after Node or Topology changes."""
        if self._fleet is None or self._fleet_dirty:
            state = self.state()
            assumed = {uid: b for uid, b in self._bookings.items() if b.assumed}
            old_names = self._fleet.node_names if self._fleet is not None else []
            self._fleet = build_fleet(
                state.nodes, (), catalog=self.catalog, topologies=state.topologies, hypernodes=state.hypernodes
            )
            self._fleet_dirty = False
            self._bookings = {}
            for uid, pod in self._pods_by_uid.items():
                self._book_pod(uid, pod)
            for uid, b in assumed.items():
                if uid not in self._bookings and b.node < len(old_names):
                    self.assume(uid, old_names[b.node], b.gpus)
            self.generation += 1
        return self._fleet

    def idle_fleet(self) -> Fleet:
        """The fleet with nothing running (validation, mutation, AdmissionCheck Retry vs Rejected), per generation."""
        self.fleet()
        if self._idle is None or self._idle[0] != self.generation:
            self._idle = (self.generation, self.state().idle_fleet())
        return self._idle[1]

    def fleet_generation(self) -> int:
        """``generation`` after any pending rebuild: what a reservation made now would be tagged with."""
        self.fleet()
        return self.generation

    def state(self) -> ClusterState:
        """Typed objects of the current version (for quota and job lookups)."""
        if self._state is None or self._state[0] != self.version:
            state = from_objects(list(self.objects.values()), catalog=self.catalog)
            self._state = (self.version, state)
        return self._state[1]

    def get(self, group: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.objects.get((group, kind, namespace, name))


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    uid = meta.get("uid")
    if isinstance(uid, str) and uid:
        return uid
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
