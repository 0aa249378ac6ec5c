"""Kubernetes Events (core/v1) on the objects users look at, written off the event loop and only by the writer.

An Event is what ``kubectl describe`` shows under the object: kilter marks
what users care about there — a gang planned, a job refused at enqueue, an
AdmissionCheck set to Retry or Rejected — with the reason. A verb or a
controller round must never wait for the API, so Events go to one worker
thread; a failed write is logged and counted (``failed``), never raised. The same event (object,
reason, message) is written at most once per ``repeat_s``: the verbs that
cause them run every scheduling cycle. Only the replica that is the writer
(the leader) records them, so two replicas never both say it.
"""

from __future__ import annotations

import datetime
import logging
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from kilter.kube.api import ApiServer, object_path
from kilter.model.errors import KilterError

__all__ = ["COMPONENT", "EventRecorder", "Involved"]

log = logging.getLogger("kilter.events")

COMPONENT = "kilter"
MAX_REMEMBERED = 10_000


@dataclass(frozen=True)
class Involved:
    """The object an Event is about (its ``involvedObject``)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""


class EventRecorder:
    def __init__(
        self,
        api: ApiServer,
        *,
        is_writer: Callable[[], bool] = lambda: True,
        repeat_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.is_writer = is_writer
        self.repeat_s = repeat_s
        self.clock = clock
        self.instance = socket.gethostname()
        self.failed = 0  # Events the API refused or could not be reached for; written only by the worker thread
        self._last: dict[tuple[Involved, str, str], float] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kilter-events")

    def record(self, obj: Involved, reason: str, message: str, *, warning: bool = False) -> Future[None] | None:
        """Write the Event (unless this replica is not the writer, or said the same lately); its future."""
        if not self.is_writer():
            return None
        key = (obj, reason, message)
        now = self.clock()
        if now - self._last.get(key, -self.repeat_s) < self.repeat_s:
            return None
        if len(self._last) > MAX_REMEMBERED:
            self._last.clear()
        self._last[key] = now
        return self._pool.submit(self._write, obj, reason, message, warning)

    def _write(self, obj: Involved, reason: str, message: str, warning: bool) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved = {"apiVersion": obj.api_version, "kind": obj.kind, "name": obj.name}
        if obj.namespace:  # a cluster-scoped object (a Node) has none; its Events live in "default"
            involved["namespace"] = obj.namespace
        namespace = obj.namespace or "default"
        if obj.uid:
            involved["uid"] = obj.uid
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{obj.name}.", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.api.call("POST", object_path("/api/v1", "events", namespace=namespace), event)
        except KilterError as exc:
            self.failed += 1
            log.warning("event %s on %s %s/%s not written: %s", reason, obj.kind, obj.namespace, obj.name, exc)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
