"""Kubernetes Events on Volcano PodGroups: paced per job and reason, written by ``PodGroupEvents`` when connected.

Volcano asks ``jobEnqueueable`` about a waiting job every scheduling cycle
(about a second), so a job that can never fit would earn an Event a second:
``PacedEvents`` lets one through per job per reason each ``EVENT_EVERY_S``,
logs it, and hands it to the ``EventSink`` (``PodGroupEvents`` with a
cluster, none without).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future

from kilter.kube.api import ApiServer
from kilter.kube.events import EventRecorder, Involved
from kilter.quota.bound_jobs import BoundJob

__all__ = ["EVENT_EVERY_S", "EventSink", "PacedEvents", "PodGroupEvents"]

log = logging.getLogger("kilter.volcano")

PODGROUP_API = "scheduling.volcano.sh/v1beta1"
EVENT_EVERY_S = 600.0  # one "never fits" Event per job per reason in this long

EventSink = Callable[[str, str, str, str], object]  # (namespace, PodGroup name, reason, message)


class PacedEvents:
    """At most one Event per (job, reason) each ``EVENT_EVERY_S`` seconds of ``clock``."""

    def __init__(self, sink: EventSink | None, *, clock: Callable[[], float]) -> None:
        self.sink = sink
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}  # (job key, reason) -> when its last Event went, clock seconds

    def warn(self, job: BoundJob, reason: str, message: str) -> None:
        now = self.clock()
        key = (job.key, reason)
        if now - self._last.get(key, -EVENT_EVERY_S) < EVENT_EVERY_S:
            return
        self._last[key] = now
        log.info("PodGroup %s: %s: %s", job.key, reason, message)
        if self.sink is not None:
            self.sink(job.namespace, job.name, reason, message)


class PodGroupEvents:
    """A Warning Event on the PodGroup, written off the event loop, by the writer only (``EventRecorder``)."""

    def __init__(self, api: ApiServer, *, is_writer: Callable[[], bool] = lambda: True) -> None:
        self.recorder = EventRecorder(api, is_writer=is_writer, repeat_s=0.0)  # the extender already paces them

    def __call__(self, namespace: str, name: str, reason: str, message: str) -> Future[None] | None:
        return self.recorder.record(Involved(PODGROUP_API, "PodGroup", namespace, name), reason, message, warning=True)

    def close(self) -> None:
        self.recorder.close()
