"""List then watch one resource of a live cluster, as client-go's reflector does, and hand over the events.

One reflector per resource, each on its own thread, so a slow list or a
stalled watch of one resource never holds up another or the event loop:

1. **List** in pages (``limit``/``continue``); a continue token that expired
   (410) starts the list again. The whole list replaces what the store held of
   that kind, so nothing is lost or duplicated across a relist.
2. **Watch** from the list's ``resourceVersion`` with bookmarks, for
   ``timeoutSeconds``, then again from the last version seen (an event's or a
   bookmark's). A watch answered 410 Gone — the version is older than the
   server's history — goes back to 1.
3. A dropped connection or a refusal waits (exponential backoff with jitter,
   reset once a watch has worked) and resumes from the last version.
4. A resource the server does not serve (its CRD is not installed: 404) is
   *absent*; it is looked for again every ``absent_retry_s``.

Objects are cut down on arrival to the fields kilter reads: Nodes and Pods
are decoded straight from the wire into kilter's typed views (``typed``;
what kilter does not read is skipped by the decoder, never built), their
lists asked for as Kubernetes protobuf where the server has it, other
kinds are kept as received. ``keep`` drops what kilter
never needs (pods that ask for no GPU never reach the store). Batches go to
``sink`` from the reflector's thread; the live feed moves them onto the event
loop.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode

import msgspec

from kilter.kube import protobuf
from kilter.kube.api import ApiError, ApiServer
from kilter.model import codec
from kilter.model.core_v1 import Node, Pod
from kilter.state.store import ADDED, DELETED, MODIFIED, Event, Stored

__all__ = ["Batch", "Reflector", "WatchedResource"]

log = logging.getLogger("kilter.state")

Obj = dict[str, Any]


@dataclass(frozen=True)
class WatchedResource:
    """What to list and watch, and how to cut it down to what kilter reads."""

    group: str
    versions: tuple[str, ...]  # served versions kilter reads, preferred first
    plural: str
    kind: str
    label_selector: str = ""
    field_selector: str = ""
    typed: type[Node] | type[Pod] | None = None
    keep: Callable[[Any], bool] | None = None

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


@dataclass(frozen=True)
class Batch:
    """Events of one resource; ``relist`` (the whole set after a list) replaces what the store held of it."""

    resource: WatchedResource
    events: list[Event] = field(default_factory=list)
    relist: list[Stored] | None = None
    received: float = field(default_factory=time.monotonic)  # when the reflector handed it over: the state's lag


T = TypeVar("T")


class _ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class _ListPage(msgspec.Struct, Generic[T]):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[T] | None = None


class _WatchEvent(msgspec.Struct):
    type: str = ""
    object: msgspec.Raw = msgspec.Raw(b"{}")


# codec.JsonDecoder: JSON nested past the recursion limit is a DecodeError like any bad JSON, never a
# RecursionError, which no handler here catches and which ended the reflector's thread.
_event = codec.JsonDecoder(_WatchEvent)
_dict = codec.JsonDecoder(Obj)
_loose = codec.JsonDecoder(_ListPage[msgspec.Raw])


class Gone(Exception):
    """The server no longer has the history asked for (410): list again."""


@contextlib.contextmanager
def _gone_on_410() -> Iterator[None]:
    """A call the server answers 410 Gone raises ``Gone``."""
    try:
        yield
    except ApiError as exc:
        if exc.code == 410:
            raise Gone() from None
        raise


class Reflector:
    def __init__(
        self,
        api: ApiServer,
        resource: WatchedResource,
        sink: Callable[[Batch], None],
        *,
        page_size: int = 500,
        watch_timeout_s: int = 300,
        absent_retry_s: float = 30.0,
        backoff_s: tuple[float, float] = (0.2, 30.0),
    ) -> None:
        self.api = api
        self.resource = resource
        self.sink = sink
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.absent_retry_s = absent_retry_s
        self.backoff_s = backoff_s
        self.version = ""  # the API version in use, once found
        self.resource_version = ""
        self.state = "starting"
        self.synced = False
        self.lists = 0
        self.watches = 0
        self.last_error = ""
        self.unreadable = 0  # objects skipped in a list or forgotten from the watch because kilter cannot read them
        self._delay = backoff_s[0]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Any = None
        item: Any = resource.typed or Obj
        self._page: codec.JsonDecoder[_ListPage[Any]] = codec.JsonDecoder(_ListPage[item])
        self._object: codec.JsonDecoder[Any] = codec.JsonDecoder(item)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Run on a new thread (again after ``stop``, from the version it had reached)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name=f"reflector-{self.resource.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError, AttributeError):
                conn.sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked reading the watch
        if self._thread is not None:
            self._thread.join(timeout=5)

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.version:
                    self.version = self._discover()
                    if not self.version:
                        self.state = "absent"
                        if not self.synced:
                            self.synced = True  # nothing to wait for: kilter reads it once it appears
                            self.sink(Batch(self.resource))
                        self._stop.wait(self.absent_retry_s)
                        continue
                if not self.resource_version:
                    self._list()
                self._watch()
            except Gone:
                self.resource_version = ""
            except ApiError as exc:
                if exc.code == 404:
                    self.version, self.resource_version = "", ""
                    continue
                self._fail(str(exc))
            except (OSError, ValueError, msgspec.DecodeError, msgspec.ValidationError) as exc:
                self._fail(f"{type(exc).__name__}: {exc}")

    def _fail(self, message: str) -> None:
        if message != self.last_error:
            log.warning("%s: %s (retrying)", self.resource.name, message)
        self.last_error = message
        self.state = "retrying"
        self._stop.wait(self._delay * (0.5 + random.random()))
        self._delay = min(self._delay * 2, self.backoff_s[1])

    def list_once(self) -> list[Stored]:
        """The resource's objects now (a one-shot read for commands; [] when the server does not serve it)."""
        self.version = self._discover()
        if not self.version:
            return []
        got: list[Stored] = []
        sink, self.sink = self.sink, lambda batch: got.extend(batch.relist or ())
        try:
            self._list()
        finally:
            self.sink = sink
        return got

    # ------------------------------------------------------------------ discovery

    def _discover(self) -> str:
        """The first of the resource's versions the server serves it in, or "" when it serves none."""
        r = self.resource
        for version in r.versions:
            path = f"/apis/{r.group}/{version}" if r.group else f"/api/{version}"
            try:
                found = self.api.call("GET", path)
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            names = {res.get("name") for res in (found or {}).get("resources", []) if isinstance(res, Mapping)}
            if r.plural in names:
                return version
        return ""

    def _path(self) -> str:
        r = self.resource
        prefix = f"/apis/{r.group}/{self.version}" if r.group else f"/api/{self.version}"
        return f"{prefix}/{r.plural}"

    def _query(self, **extra: str | int) -> str:
        params: dict[str, str | int] = {}
        if self.resource.label_selector:
            params["labelSelector"] = self.resource.label_selector
        if self.resource.field_selector:
            params["fieldSelector"] = self.resource.field_selector
        params.update(extra)
        return urlencode(params)

    def _api_version(self) -> str:
        return f"{self.resource.group}/{self.version}" if self.resource.group else self.version

    def _shape(self, obj: Stored) -> Stored | None:
        """The object as the store keeps it, or None when kilter does not keep it."""
        if isinstance(obj, dict):
            obj["apiVersion"] = self._api_version()
            obj["kind"] = self.resource.kind
        if self.resource.keep is not None and not self.resource.keep(obj):
            return None
        return obj

    def _items(self, raw: bytes, content_type: str, decoder: protobuf.Decoder) -> tuple[list[Any], _ListMeta]:
        """A list page's items and metadata; a typed page that does not decode is read item by item.

        An object kilter cannot read is skipped with a warning rather than
        holding up every other object of the resource.
        """
        if self.resource.typed is not None and protobuf.is_protobuf(content_type):
            listed = protobuf.decode_page(decoder, self.resource.typed, raw)
            self.unreadable += len(listed.skipped)
            for why in listed.skipped:
                log.warning("%s: an object kilter cannot read was skipped: %s", self.resource.name, why)
            return listed.items, _ListMeta(listed.resource_version, listed.continue_)
        try:
            page = self._page.decode(raw)
            return page.items or [], page.metadata
        except msgspec.ValidationError:
            if self.resource.typed is None:
                raise
        loose = _loose.decode(raw)
        items = []
        for item in loose.items or ():
            try:
                items.append(self._object.decode(item))
            except msgspec.ValidationError as exc:
                self.unreadable += 1
                log.warning("%s: an object kilter cannot read was skipped: %s", self.resource.name, exc)
        return items, loose.metadata

    # ------------------------------------------------------------------ list

    def _list(self) -> None:
        self.state = "listing"
        while True:
            try:
                objects = self._pages()
                break
            except Gone:
                log.info("%s: list continue token expired; listing again", self.resource.name)
        self.lists += 1
        self.synced = True
        self.sink(Batch(self.resource, relist=objects))

    def _pages(self) -> list[Stored]:
        """Every page of the list, in order, cut down to what kilter keeps."""
        objects: list[Stored] = []
        token = ""
        decoder = protobuf.Decoder()  # one per list: what it shares lives as long as the list's objects
        with self.api.keep_alive():
            while True:
                items, meta = self._items(*self._page_at(token), decoder)
                for item in items:
                    shaped = self._shape(item)
                    if shaped is not None:
                        objects.append(shaped)
                token = meta.continue_
                if not token:
                    self.resource_version = meta.resource_version
                    return objects

    def _page_at(self, token: str) -> tuple[bytes, str]:
        """One page's bytes and Content-Type: protobuf for Pods and Nodes where the server has it, else JSON."""
        query = self._query(limit=self.page_size, **({"continue": token} if token else {}))
        accept = protobuf.ACCEPT if self.resource.typed is not None else "application/json"
        with _gone_on_410():  # the continue token expired
            return self.api.call_raw("GET", f"{self._path()}?{query}", accept=accept)

    # ------------------------------------------------------------------ watch

    def _watch(self) -> None:
        self.state = "watching"
        query = self._query(
            watch=1,
            resourceVersion=self.resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=self.watch_timeout_s,
        )
        with _gone_on_410():  # refused outright rather than as a watch ERROR event: list again all the same
            conn, response = self.api.stream(f"{self._path()}?{query}", timeout_s=self.watch_timeout_s + 30)
        self._conn = conn
        self.watches += 1
        try:
            while not self._stop.is_set():
                line = response.readline()
                if not line:
                    break  # the server ended the watch (timeout or restart): resume from the last version
                if line.strip():
                    self._delay = self.backoff_s[0]
                    event = self._on_line(line)
                    if event is not None:
                        self.sink(Batch(self.resource, [event]))
        finally:
            self._conn = None
            conn.close()

    def _on_line(self, line: bytes) -> Event | None:
        """The store's event for one line of the watch (None for a bookmark, an object kilter never kept, or a line
        it cannot read).

        A line that is no watch event kilter can read (nested past the
        recursion limit, say) is skipped and counted in ``unreadable``: its
        object, if it names one, cannot be found in it, and failing the watch
        would only resume from the same version and meet the same line again.
        The watch's resourceVersion stays where it was.
        """
        try:
            return self._on_event(_event.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self.unreadable += 1
            log.warning("%s: a watch event kilter cannot read was skipped: %s", self.resource.name, exc)
            return None

    def _on_event(self, event: _WatchEvent) -> Event | None:
        if event.type == "ERROR":
            status = _dict.decode(event.object)
            if status.get("code") == 410:
                raise Gone()
            raise ApiError(int(status.get("code") or 0), str(status.get("message") or "watch error"))
        if event.type == "BOOKMARK" or self.resource.typed is None:
            obj = _dict.decode(event.object)
            version = (obj.get("metadata") or {}).get("resourceVersion")
        else:
            try:
                obj = self._object.decode(event.object)
            except msgspec.ValidationError as exc:
                return self._unreadable(event.object, exc)  # a DecodeError of its own (too deep) skips the line
            version = obj.metadata.resource_version
        if isinstance(version, str) and version:
            self.resource_version = version
        if event.type == "BOOKMARK":
            return None
        if event.type not in (ADDED, MODIFIED, DELETED):
            raise ValueError(f"unknown watch event type {event.type!r}")
        shaped = self._shape(obj)
        if shaped is not None:
            return Event(event.type, shaped)
        if event.type == ADDED:
            return None
        # No longer kept (or never was): the store drops it if it holds it.
        if not isinstance(obj, dict):
            return Event(DELETED, obj)
        return Event(
            DELETED, {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": obj.get("metadata") or {}}
        )

    def _unreadable(self, raw: msgspec.Raw, exc: msgspec.ValidationError) -> Event:
        """An object kilter cannot read: forgotten (a DELETED for the store), and the watch goes on past it."""
        meta = _dict.decode(raw).get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        version = meta.get("resourceVersion")
        if isinstance(version, str) and version:
            self.resource_version = version
        where = "/".join(str(meta.get(k)) for k in ("namespace", "name") if meta.get(k))
        self.unreadable += 1
        log.warning("%s: %s cannot be read, kilter forgets it: %s", self.resource.name, where or "an object", exc)
        return Event(DELETED, {"apiVersion": self._api_version(), "kind": self.resource.kind, "metadata": meta})
