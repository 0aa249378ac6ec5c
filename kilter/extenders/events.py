"""Kubernetes Events on Volcano PodGroups: the ``EventSink`` of ``VolcanoExtender`` when a cluster is connected."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

from kilter.kube.api import ApiServer
from kilter.kube.events import EventRecorder, Involved

__all__ = ["PodGroupEvents"]

PODGROUP_API = "scheduling.volcano.sh/v1beta1"


class PodGroupEvents:
    """A Warning Event on the PodGroup, written off the event loop, by the writer only (``EventRecorder``)."""

    def __init__(self, api: ApiServer, *, is_writer: Callable[[], bool] = lambda: True) -> None:
        self.recorder = EventRecorder(api, is_writer=is_writer, repeat_s=0.0)  # the extender already paces them

    def __call__(self, namespace: str, name: str, reason: str, message: str) -> Future[None] | None:
        return self.recorder.record(Involved(PODGROUP_API, "PodGroup", namespace, name), reason, message, warning=True)

    def close(self) -> None:
        self.recorder.close()
