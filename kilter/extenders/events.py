"""Kubernetes Events on Volcano PodGroups, written off the event loop.

A verb must answer well inside Volcano's ``httpTimeout``, and an API call can
take longer than that, so an Event is handed to one worker thread and the
verb returns at once; a failed write is logged, never raised into a verb.
"""

from __future__ import annotations

import datetime
import logging
import socket
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import quote

from kilter.model.errors import KilterError
from kilter.state.api import ApiServer

__all__ = ["PodGroupEvents"]

log = logging.getLogger("kilter.events")

COMPONENT = "kilter"


class PodGroupEvents:
    """The ``EventSink`` of ``VolcanoExtender`` when a cluster is connected."""

    def __init__(self, api: ApiServer) -> None:
        self.api = api
        self.instance = socket.gethostname()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kilter-events")

    def __call__(self, namespace: str, name: str, reason: str, message: str) -> Future[None]:
        return self._pool.submit(self._write, namespace, name, reason, message)

    def _write(self, namespace: str, name: str, reason: str, message: str) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "namespace": namespace,
                "name": name,
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.api.call("POST", f"/api/v1/namespaces/{quote(namespace)}/events", event)
        except KilterError as exc:
            log.warning("event %s on PodGroup %s/%s not written: %s", reason, namespace, name, exc)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
