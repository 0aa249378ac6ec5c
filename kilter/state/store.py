"""The live cluster state: fed add/update/delete events, read by the servers.

Every feeder speaks Kubernetes watch events (``ADDED``, ``MODIFIED``,
``DELETED`` with the object): the snapshot feed diffs a file against what
it last loaded, and a list/watch feed of a live cluster produces the same
events. The store keeps objects by (group, kind, namespace, name) — Nodes
and Pods typed from the moment they arrive (a live feed decodes them straight
from the wire; a pod costs a typed view, not a dict of everything the API
sent), the few objects of the other kinds as received — and derives what
the verbs read:

* the fleet model, rebuilt only when Nodes or Topologies change (a rebuild
  bumps ``generation``, so holders of plans know to re-check them; read it
  after ``fleet()``, which does a pending rebuild);
* GPU bookings per pod UID, moved incrementally on Pod events — a bind or a
  finished pod must not cost a rebuild of the fleet;
* the typed ``ClusterState``, rebuilt per version from per-kind lists that
  are themselves rebuilt only when their kind changed, each object converted
  once — so a pod event costs a list copy, not a conversion of the cluster.

One object kilter cannot read never holds up the others: a Node or Pod
that does not type is left out of a ``replace`` (as a live reflector skips
it), an object of another kind that does not convert is left out of
``state()``, each named in ``unreadable()`` and logged once. A bound Pod
whose GPU count does not read is kept, and holds its node whole
(``topology.pod_gpus``, ``whole_nodes``), named in ``unreadable()`` too.
What the feeder itself last failed at (a snapshot that did not parse) is
``feed_error``.

An update applies whole or not at all: ``replace`` types every object
before it changes anything, what follows reads typed objects through rules
that answer for any value (a count that does not read is a value, not an
exception), and a fleet rebuild builds the new fleet before it touches the
old one's bookings.

A pod the scheduler has just bound but the feed has not shown yet is booked
as *assumed* (the scheduler's own assume cache does the same); the feed's
version replaces it, so GPUs are never counted twice. GPUs a gang's plan
holds for its pods still to come are *reserved* (``reservations``): booked
like pods, and booked again after a fleet rebuild (bound pods, then assumed
pods, then reservations oldest first), so that whoever holds a plan never
touches the fleet's bitmap itself.

An assumed booking lasts ``assume_ttl_s`` (``ASSUME_TTL_S``) unless the feed
shows the pod first: the bind verb is reachable by anyone who reaches
kilter's port, and a booking the feed never confirms (a forged or failed
bind, a pod deleted meanwhile) must not hold GPUs for ever.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from kilter.model import codec
from kilter.model.core_v1 import Node, Pod
from kilter.model.errors import InputError
from kilter.model.nvidia_dra import COMPUTE_DOMAIN_GROUP, COMPUTE_DOMAIN_KIND, ComputeDomain
from kilter.quota.tree import build_tree
from kilter.state import copies
from kilter.state.cluster import KNOWN_KINDS, KUEUE, TYPES, ClusterState
from kilter.state.events import (
    ADDED,
    DELETED,
    MODIFIED,
    TYPED_KINDS,
    Event,
    ObjectKey,
    Stored,
    object_key,
    same_view,
    typed_view,
    where,
)
from kilter.state.pod_index import PodIndex
from kilter.state.reservations import Held, Reservations
from kilter.state.snapshot import RawObjects
from kilter.state.watchers import KindWatchers
from kilter.state.whole_nodes import WholeNodes
from kilter.topology import pod_gpus
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.fleet import ENDED_PHASES, Fleet, build_fleet, unreadable_pod
from kilter.topology.health import DEFAULTS, HealthSignals

__all__ = [
    "ADDED",
    "DELETED",
    "MODIFIED",
    "Booking",
    "ClusterStore",
    "Event",
    "ObjectKey",
    "Stored",
    "object_key",
    "pod_uid",
]

log = logging.getLogger("kilter.state")

ASSUME_TTL_S = 120.0
"""How long an assumed booking waits for the feed (seconds). A real bind reaches the watch in well under a second;
two minutes also covers a relist after 410 Gone of a 100k-pod cluster. Later than that, the bind was forged, failed
or its pod deleted, and the GPUs go back."""
_FLEET_KINDS = {("", "Node"), (KUEUE, "Topology"), ("topology.volcano.sh", "HyperNode")}
_SPARE_KINDS = ((KUEUE, "ResourceFlavor"), (KUEUE, "ClusterQueue"), (KUEUE, "Cohort"))


@dataclass(frozen=True)
class Booking:
    node: int
    gpus: int
    assumed: bool


class ClusterStore:
    def __init__(
        self,
        *,
        catalog: Catalog | None = None,
        assume_ttl_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        spare_nodes_default: int = 0,
        spares_lent_default: bool = False,
        health: HealthSignals = DEFAULTS,
    ) -> None:
        self.catalog = catalog or Catalog(BUILTIN)
        self.health = health  # what, beyond the built-in rules, makes a node unusable (``topology.health``)
        self.spare_nodes_default = spare_nodes_default  # --spare-nodes-per-domain (``topology.spare_settings``)
        self.spares_lent_default = spares_lent_default  # --spares-for-preemptible
        self._spares_of: tuple[int, ...] | None = None  # (generation, versions of the kinds that set spares)
        self._spare_problems: tuple[str, ...] = ()
        self.assume_ttl_s = ASSUME_TTL_S if assume_ttl_s is None else assume_ttl_s
        self.clock = clock
        self._assumed: dict[str, float] = {}  # uid -> when its assumed booking expires (clock seconds), oldest first
        self.assumed_expired = 0  # assumed bookings dropped because the feed never showed the pod bound
        self.objects: dict[ObjectKey, Stored] = {}
        self.version = 0
        self.generation = 0
        self.ready = False
        self.ignored: dict[str, int] = {}
        self.feed_error = ""  # why the feeder's last reload failed ("" when it succeeded): the state is older
        self.feed_failures = 0  # reloads that failed since start
        self._left_out: dict[ObjectKey, str] = {}  # Nodes and Pods the last replace could not type: why
        self._unconverted: dict[ObjectKey, str] = {}  # objects of the other kinds state() could not convert
        self._inactive: tuple[int, list[str]] | None = None  # (version, inactive ClusterQueues of that version)
        self._duplicates: dict[ObjectKey, str] = {}  # objects the last replace was given twice: which copy it kept
        self._fleet: Fleet | None = None
        self._fleet_dirty = True
        self._bookings: dict[str, Booking] = {}
        self._whole = WholeNodes()  # nodes held whole by bound pods whose GPU count does not read
        self._reservations = Reservations()
        self._pods_by_uid: dict[str, Pod] = {}
        self._pod_index = PodIndex(self._pods_by_uid)
        self._by_kind: dict[tuple[str, str], dict[ObjectKey, Stored]] = {kind: {} for kind in KNOWN_KINDS}
        self._kind_version: Counter[tuple[str, str]] = Counter()
        self._typed: dict[ObjectKey, Any] = {}  # the other kinds' typed views, converted once per change
        self._lists: dict[tuple[str, str], tuple[int, list[Any]]] = {}
        self._state: tuple[int, ClusterState] | None = None
        self._idle: tuple[tuple[int, ...] | None, Fleet] | None = None
        self.watchers = KindWatchers()  # told of each change applied, by kind (``watchers``)

    # ------------------------------------------------------------------ feeding

    def apply(self, events: Iterable[Event]) -> int:
        """Apply watch events in order; returns how many changed something.

        Every event's object is keyed and typed before the first is applied:
        one that does not read raises ``InputError`` and changes nothing.
        """
        changes = []
        for event in events:
            key = object_key(event.object)
            if event.type != DELETED and key[:2] in KNOWN_KINDS:
                event = Event(event.type, typed_view(key, event.object))
            changes.append((key, event))
        return self._apply(changes)

    def _apply(self, changes: Iterable[tuple[ObjectKey, Event]]) -> int:
        changed = 0
        try:
            for key, event in changes:
                if self._apply_one(key, event):
                    changed += 1
        finally:  # whatever was applied is a new version: no reader keeps a list or state of the old one
            if changed:
                self.version += 1
        return changed

    def replace(self, objects: Iterable[Stored]) -> list[Event]:
        """Make the store hold exactly ``objects`` (a relist); returns the events that did it.

        Nodes and Pods are typed before anything changes. One that does not
        type (``spec.containers: "oops"``), or an object without a name, is
        left out with a warning, as a live reflector skips an object it
        cannot read: refusing the whole snapshot for it would stall every
        other change (see ``unreadable``). An object given twice (two Nodes
        of one name) is kept once, the same copy whatever the order of the
        file (``copies.newer``), and named in ``problems``.
        """
        incoming: dict[ObjectKey, Stored] = {}
        ignored: dict[str, int] = {}
        left_out: dict[ObjectKey, str] = {}
        duplicates: dict[ObjectKey, str] = {}
        for obj in objects:
            try:
                key = object_key(obj)
            except InputError as exc:
                left_out[("", "?", "", str(len(left_out)))] = f"an object left out: {exc}"
                continue
            if key[:2] not in KNOWN_KINDS:
                name = f"{obj.get('apiVersion') if isinstance(obj, Mapping) else 'v1'}/{key[1]}"
                ignored[name] = ignored.get(name, 0) + 1
                continue
            try:
                typed = typed_view(key, obj)
            except InputError as exc:
                left_out[key] = f"{where(key)} left out, kilter cannot read it: {exc}"
                continue
            held = incoming.get(key)
            incoming[key] = typed if held is None else copies.newer(held, typed)
            if held is not None:
                other = held if incoming[key] is typed else typed
                kept = copies.kept_copy(incoming[key], other)
                duplicates[key] = f"{where(key)} appears more than once; kilter keeps {kept}"
        for key, why in [*left_out.items(), *duplicates.items()]:
            if self._left_out.get(key, self._duplicates.get(key)) != why:
                log.warning("%s", why)
        self._left_out, self._duplicates = left_out, duplicates
        self.ignored = ignored
        self.ready = True
        if not self.objects:  # a first load (a command's one reading): every object is new, nothing to compare
            by_kind: dict[tuple[str, str], dict[ObjectKey, Stored]] = {}
            for key, obj in incoming.items():
                by_kind.setdefault(key[:2], {})[key] = obj
            return [event for kind, objs in by_kind.items() for event in self._add_all(kind, objs)]
        changes = self._difference(incoming, self.objects)
        self._apply(changes)
        return [event for _, event in changes]

    def replace_kind(self, group: str, kind: str, objects: Iterable[Stored]) -> list[Event]:
        """Make the store hold exactly ``objects`` of one kind (a relist of one resource); the events that did it."""
        incoming: dict[ObjectKey, Stored] = {}
        for obj in objects:
            key = object_key(obj)
            incoming[key] = typed_view(key, obj)
        held = self._by_kind.get((group, kind))
        if held is not None and not held and incoming:
            return self._add_all((group, kind), incoming)
        changes = self._difference(incoming, held or {})
        self._apply(changes)
        return [event for _, event in changes]

    def _add_all(self, kind: tuple[str, str], incoming: dict[ObjectKey, Stored]) -> list[Event]:
        """A kind's first list: every object is new, so nothing to compare (a cold start's 100k pods)."""
        self.objects.update(incoming)
        self._by_kind[kind].update(incoming)
        self._kind_version[kind] += 1
        self.version += 1
        if kind in _FLEET_KINDS:
            self._fleet_dirty = True
        if kind == ("", "Pod"):
            for obj in incoming.values():
                self._pod_changed(None, obj)  # type: ignore[arg-type]
        self.watchers.added(kind, incoming.values())
        return [Event(ADDED, obj) for obj in incoming.values()]

    def _difference(
        self, incoming: Mapping[ObjectKey, Stored], held: Mapping[ObjectKey, Stored]
    ) -> list[tuple[ObjectKey, Event]]:
        """The events that turn ``held`` (what the store holds of the relisted scope) into ``incoming``."""
        changes = [(key, Event(DELETED, old)) for key, old in held.items() if key not in incoming]
        for key, obj in incoming.items():
            old = self.objects.get(key)
            if old is None:
                changes.append((key, Event(ADDED, obj)))
            elif not same_view(old, obj):
                changes.append((key, Event(MODIFIED, obj)))
        return changes

    def _apply_one(self, key: ObjectKey, event: Event) -> bool:
        kind = key[:2]
        if kind not in KNOWN_KINDS:
            return False
        old = self.objects.get(key)
        if event.type == DELETED:
            if old is None:
                return False
            del self.objects[key]
            del self._by_kind[kind][key]
            obj: Stored | None = None
        else:
            obj = typed_view(key, event.object)
            if old is not None and same_view(old, obj):
                return False
            self.objects[key] = self._by_kind[kind][key] = obj
        self._typed.pop(key, None)
        self._kind_version[kind] += 1
        if kind in _FLEET_KINDS:
            self._fleet_dirty = True
        if kind == ("", "Pod"):
            self._pod_changed(old, obj)  # type: ignore[arg-type]
        self.watchers.changed(kind, old, obj)
        return True

    # ------------------------------------------------------------------ pods and bookings

    def _pod_changed(self, old: Pod | None, new: Pod | None) -> None:
        if old is not None:
            uid = pod_uid(old)
            self._pods_by_uid.pop(uid, None)
            self._pod_index.drop(uid, old)
            if not self._fleet_dirty:
                self._unbook(uid)
        if new is None:
            return
        uid = pod_uid(new)
        self._pods_by_uid[uid] = new
        self._pod_index.add(uid, new)
        if not self._fleet_dirty:
            self._unbook(uid)
            self._book_pod(uid, new)

    def _book_pod(self, uid: str, pod: Pod) -> None:
        fleet = self._fleet
        if fleet is None or not pod.spec.node_name or pod.status.phase in ENDED_PHASES:
            return
        node = fleet.node_index.get(pod.spec.node_name)
        if node is None:
            return
        resource = fleet.platform_of_node(node).device_resource
        gpus = pod_gpus.count(pod.spec, resource, path="spec")
        if isinstance(gpus, pod_gpus.Unreadable):
            self._whole.hold(fleet, uid, node, unreadable_pod(pod, gpus))
            return
        self._whole.make_room(fleet, node, gpus)
        gpus = min(gpus, fleet.bitmap.node_free_gpus(node))
        if gpus > 0:
            fleet.bitmap.allocate(node, gpus)
            self._bookings[uid] = Booking(node, gpus, assumed=False)

    def _unbook(self, uid: str) -> None:
        booking = self._bookings.pop(uid, None)
        self._assumed.pop(uid, None)
        if self._fleet is None:
            return
        self._whole.drop(self._fleet, uid)
        if booking is not None:
            self._fleet.bitmap.release(booking.node, booking.gpus)
            self._whole.fill(self._fleet, booking.node)  # a node an unreadable pod holds stays full

    def assume(self, uid: str, node_name: str, gpus: int) -> None:
        """Book a pod the scheduler bound before the feed shows it bound (no-op if the feed already does).

        The booking expires after ``assume_ttl_s`` unless the feed shows the
        pod by then (its own booking replaces this one).
        """
        fleet = self.fleet()
        if uid not in self._bookings:
            self._assume(fleet, uid, node_name, gpus, self.clock() + self.assume_ttl_s)

    def _assume(self, fleet: Fleet, uid: str, node_name: str, gpus: int, until: float) -> None:
        node = fleet.node_index.get(node_name)
        if node is None:
            raise InputError(f"node {node_name} is not a GPU node kilter knows")
        if uid in self._bookings or gpus <= 0:
            return
        gpus = min(gpus, fleet.bitmap.node_free_gpus(node))
        if gpus > 0:
            fleet.bitmap.allocate(node, gpus)
            self._bookings[uid] = Booking(node, gpus, assumed=True)
            self._assumed[uid] = until

    def _expire_assumed(self) -> None:
        """Drop assumed bookings past their time, oldest first (deadlines are in insertion order: one TTL)."""
        if not self._assumed:
            return
        now = self.clock()
        while self._assumed:
            uid, until = next(iter(self._assumed.items()))
            if until > now:
                return
            self._assumed.pop(uid)
            booking = self._bookings.get(uid)
            if booking is not None and booking.assumed:
                self._unbook(uid)
                self.assumed_expired += 1

    def forget(self, uid: str) -> None:
        """Drop an assumed booking (the placement was taken back); what the feed shows bound stays."""
        booking = self._bookings.get(uid)
        if booking is not None and booking.assumed:
            self._unbook(uid)

    def reserve(self, owner: str, slots: Sequence[tuple[str, int]]) -> bool:
        """Hold GPUs for ``owner`` (a gang's key): every (node name, GPUs) fits a usable node's free GPUs, or
        nothing is booked and False. Added to what the owner holds already; kept across fleet rebuilds."""
        return self._reservations.reserve(self.fleet(), owner, slots)

    def release_slot(self, owner: str, node_name: str, gpus: int) -> bool:
        """Give back one of ``owner``'s slots (its pod was bound: the pod's own booking takes over); False if the
        owner holds no such slot, e.g. because a rebuild lost the reservation."""
        return self._reservations.release_slot(self.fleet(), owner, node_name, gpus)

    def unreserve(self, owner: str) -> None:
        """Give back all of ``owner``'s GPUs, and forget that a rebuild lost its reservation."""
        self._reservations.unreserve(self.fleet(), owner)

    def compute_domains(self) -> list[ComputeDomain]:
        """The typed ComputeDomains, rebuilt only when one changed (not the whole ``state()`` a pod event rebuilds:
        the scheduling path asks for them on every filter of a pod with DRA claims)."""
        return self._list((COMPUTE_DOMAIN_GROUP, COMPUTE_DOMAIN_KIND), ComputeDomain)

    def reservation(self, owner: str) -> tuple[Held, ...]:
        """What ``owner`` holds in the current fleet (node, index, GPUs per slot), oldest first."""
        self.fleet()
        return self._reservations.of(owner)

    def is_reserved(self, owner: str) -> bool:
        return bool(self.reservation(owner))

    def reservation_lost(self, owner: str) -> bool:
        """A fleet rebuild dropped ``owner``'s reservation: a node of it went, turned unusable or filled up."""
        self.fleet()
        return self._reservations.was_lost(owner)

    def booking(self, uid: str) -> Booking | None:
        return self._bookings.get(uid)

    def bookings(self) -> Iterator[tuple[str, Booking]]:
        """(UID, booking) of every pod the fleet holds GPUs for, assumed ones included (after ``fleet()``)."""
        return iter(self._bookings.items())

    def pod(self, uid: str) -> Pod | None:
        return self._pods_by_uid.get(uid)

    def pods(self) -> Iterator[Pod]:
        return iter(self._pods_by_uid.values())

    def index_pods(self, labels: Iterable[str], annotations: Iterable[str]) -> None:
        """Make pods findable by these label and annotation keys (``pods_with``); the index is built on first use."""
        self._pod_index.index(labels, annotations)

    def pods_with(self, namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> list[Pod]:
        """The pods of ``namespace`` that carry every one of these labels and annotations (``PodIndex``)."""
        return self._pod_index.pods_with(namespace, labels, annotations)

    def pods_claiming(self, namespace: str, template: str) -> list[Pod]:
        """The pods of ``namespace`` whose DRA claims come from ResourceClaimTemplate ``template`` (``PodIndex``)."""
        return self._pod_index.pods_claiming(namespace, template)

    # ------------------------------------------------------------------ reading

    def fleet(self) -> Fleet:
        """The fleet model with every bound pod booked; rebuilt only after Node or Topology changes."""
        if self._fleet is not None and not self._fleet_dirty:
            self._expire_assumed()
            self._whole.fill(self._fleet)  # GPUs a reservation gave back on a node an unreadable pod holds
            self._spares(self._fleet)
            return self._fleet
        state = self.state()
        fleet = build_fleet(  # the one step that can fail on what the cluster holds: nothing is changed before it
            state.nodes,
            (),
            catalog=self.catalog,
            topologies=state.topologies,
            hypernodes=state.hypernodes,
            health=self.health,
        )
        assumed = {uid: (b, self._assumed.get(uid, 0.0)) for uid, b in self._bookings.items() if b.assumed}
        old_names = self._fleet.node_names if self._fleet is not None else []
        self._fleet, self._fleet_dirty = fleet, False
        self._assumed, self._bookings, self._whole = {}, {}, WholeNodes()
        for uid, pod in self._pods_by_uid.items():
            self._book_pod(uid, pod)
        now = self.clock()
        for uid, (b, until) in assumed.items():
            name = old_names[b.node] if b.node < len(old_names) else ""
            if uid not in self._bookings and name in self._fleet.node_index and until > now:
                self._assume(self._fleet, uid, name, b.gpus, until)  # a node gone takes its assumed pods with it
        self._reservations.rebook(self._fleet)
        self.generation += 1
        self._spares(self._fleet)
        return self._fleet

    def _spares(self, fleet: Fleet) -> None:
        """Set the fleet's spare counts again when it was rebuilt or a ResourceFlavor, ClusterQueue or Cohort
        changed (``spare_settings``); a bad setting is skipped and named in ``problems``."""
        key = (self.generation, *(self._kind_version[k] for k in _SPARE_KINDS))
        if key != self._spares_of:
            self._spare_problems = self.state().hold_spares(fleet)
            self._spares_of = key

    def idle_fleet(self) -> Fleet:
        """The fleet with nothing running (validation, mutation, AdmissionCheck Retry vs Rejected), its spares held
        as new plans see them; per generation and spare settings."""
        self.fleet()
        if self._idle is None or self._idle[0] != self._spares_of:
            self._idle = (self._spares_of, self.state().idle_fleet())
        return self._idle[1]

    def state(self) -> ClusterState:
        """Typed objects of the current version (for quota and job lookups)."""
        if self._state is None or self._state[0] != self.version:
            lists = {name: self._list(kind, cls) for name, (kind, cls) in TYPES.items()}
            received = {kind: list(self._by_kind[kind].values()) for kind in KNOWN_KINDS if kind not in TYPED_KINDS}
            raw = RawObjects(cast(dict[tuple[str, str], list[dict[str, Any]]], received), Counter(self.ignored))
            state = ClusterState(catalog=self.catalog, raw=raw, health=self.health, **lists)
            state.spare_nodes_default = self.spare_nodes_default
            state.spares_lent_default = self.spares_lent_default
            self._state = (self.version, state)
        return self._state[1]

    def problems(self) -> list[str]:
        """What is wrong with the state kilter serves, one line each, for ``/readyz``: the state is older than its
        source, objects were left out, domain labels were not believed as the nodes give them (``Fleet.fabric``: a
        node claiming a domain the others disagree with, a label split whole), objects came twice, spare settings
        were skipped, ClusterQueues are inactive. Empty when nothing is."""
        out = [self.feed_error] if self.feed_error else []
        out += self.unreadable() + self.fleet().fabric
        out += [why for _, why in sorted(self._duplicates.items())] + list(self._spare_problems)
        return out + self.inactive_cluster_queues()

    def inactive_cluster_queues(self) -> list[str]:
        """Each ClusterQueue of the state that admits nothing, with Kueue's reason (a cohort cycle above it, a
        spec Kueue refuses); per state version."""
        state = self.state()
        if self._inactive is None or self._inactive[0] != self.version:
            tree = build_tree(state.cluster_queues, state.cohorts)
            lines = [
                f"ClusterQueue {n.name} inactive ({n.inactive_reason}): {n.inactive_message}"
                for n in tree.inactive_cluster_queues()
            ]
            self._inactive = (self.version, lines)
        return self._inactive[1]

    def unreadable(self) -> list[str]:
        """Why each object kilter holds or was given is left out of the state (or, a Node whose device count is
        no count, out of the fleet; a bound Pod whose GPU count is no count, taken to hold its node whole), by
        object; empty when none is."""
        self.state()
        left_out = [why for _, why in sorted({**self._left_out, **self._unconverted}.items())]
        return left_out + list(self.fleet().unreadable_nodes.values()) + self._whole.lines()

    def _list(self, kind: tuple[str, str], cls: type[Any]) -> list[Any]:
        """The typed objects of one kind, rebuilt only when that kind changed (each object converted once).

        An object that does not convert (a ClusterQueue whose ``spec`` is a
        string) is left out with a warning rather than failing every reader
        of the state until it changes.
        """
        cached = self._lists.get(kind)
        version = self._kind_version[kind]
        if cached is not None and cached[0] == version:
            return cached[1]
        out = []
        for key in [k for k in self._unconverted if k[:2] == kind]:
            del self._unconverted[key]
        for key, obj in self._by_kind[kind].items():
            if isinstance(obj, cls):
                out.append(obj)
                continue
            typed = self._typed.get(key)
            if typed is None:
                try:
                    typed = self._typed[key] = codec.convert(obj, cls, path=where(key))
                except InputError as exc:
                    self._unconverted[key] = f"{where(key)} left out, kilter cannot read it: {exc}"
                    log.warning("%s", self._unconverted[key])
                    continue
            out.append(typed)
        self._lists[kind] = (version, out)
        return out

    def get(self, group: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """An object of a kind kept as received (Workloads, PodGroups, ...); Nodes and Pods: ``node_named``,
        ``pod_named``."""
        obj = self.objects.get((group, kind, namespace, name))
        return obj if isinstance(obj, Mapping) else None

    def pod_named(self, namespace: str, name: str) -> Pod | None:
        obj = self.objects.get(("", "Pod", namespace, name))
        return obj if isinstance(obj, Pod) else None

    def node_named(self, name: str) -> Node | None:
        obj = self.objects.get(("", "Node", "", name))
        return obj if isinstance(obj, Node) else None


def pod_uid(pod: Pod) -> str:
    """The key the store books a pod under: its UID, else ``namespace/name`` (a pod not created yet has none)."""
    return pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"
