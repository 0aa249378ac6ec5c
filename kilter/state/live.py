"""The live feed: a reflector per resource kilter reads, their events applied to the store on the event loop.

Reflectors run on their own threads and hand over batches; the first batch
of a burst schedules one drain on the loop, which applies everything that
arrived meanwhile in order, so thousands of events a second cost one
callback per burst, and the store is only ever touched by the loop thread
(the same thread the verbs run on, so no verb sees a half-applied change).
The store is ready once every resource has been listed once (a resource the
server does not serve counts as listed: there is nothing to wait for) and the
fleet model is built; what was listed is then moved out of the cyclic
collector's sight, as a snapshot load does.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from kilter.kube.api import ApiServer
from kilter.model.core_v1 import Node, Pod
from kilter.model.nvidia_dra import (
    COMPUTE_DOMAIN_GROUP,
    COMPUTE_DOMAIN_KIND,
    COMPUTE_DOMAIN_PLURAL,
    COMPUTE_DOMAIN_VERSION,
)
from kilter.state.feed import settle
from kilter.state.reflector import Batch, Reflector, WatchedResource
from kilter.state.store import ClusterStore, Stored
from kilter.topology import pod_gpus
from kilter.topology.catalog import Catalog

__all__ = ["LAG_BUCKETS_S", "Lag", "LiveFeed", "default_resources", "list_cluster"]

KUEUE = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
VOLCANO = "scheduling.volcano.sh"
HYPERNODES = "topology.volcano.sh"
ENDED = "status.phase!=Succeeded,status.phase!=Failed"


def _asks_for_gpus(catalog: Catalog) -> Callable[[Pod], bool]:
    """Whether a pod asks for a device; a pod naming none (most of a cluster's) is told by key lookups alone."""
    devices = frozenset(catalog.device_resources)

    def keep(pod: Pod) -> bool:
        spec = pod.spec
        named = set(spec.overhead)
        for c in (*spec.containers, *spec.init_containers):
            named.update(c.resources.requests, c.resources.limits)
        return pod_gpus.holds_gpus(spec, sorted(devices.intersection(named)))  # one that does not read: kept, named

    return keep


def default_resources(catalog: Catalog) -> list[WatchedResource]:
    """Every resource kilter reads: GPU pods only; Nodes and Pods decoded straight into kilter's typed views."""
    return [
        WatchedResource("", ("v1",), "nodes", "Node", typed=Node),
        WatchedResource("", ("v1",), "pods", "Pod", field_selector=ENDED, typed=Pod, keep=_asks_for_gpus(catalog)),
        *(
            WatchedResource(KUEUE, KUEUE_VERSIONS, plural, kind)
            for plural, kind in (
                ("topologies", "Topology"),
                ("resourceflavors", "ResourceFlavor"),
                ("clusterqueues", "ClusterQueue"),
                ("cohorts", "Cohort"),
                ("localqueues", "LocalQueue"),
                ("workloads", "Workload"),
                ("admissionchecks", "AdmissionCheck"),
                ("workloadpriorityclasses", "WorkloadPriorityClass"),
            )
        ),
        WatchedResource(VOLCANO, ("v1beta1",), "queues", "Queue"),
        WatchedResource(VOLCANO, ("v1beta1",), "podgroups", "PodGroup"),
        WatchedResource(HYPERNODES, ("v1alpha1",), "hypernodes", "HyperNode"),
        WatchedResource("scheduling.k8s.io", ("v1",), "priorityclasses", "PriorityClass"),
        WatchedResource(COMPUTE_DOMAIN_GROUP, (COMPUTE_DOMAIN_VERSION,), COMPUTE_DOMAIN_PLURAL, COMPUTE_DOMAIN_KIND),
    ]


LAG_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
"""Bounds of ``Lag``: a watch event normally reaches the store in a millisecond; seconds mean the loop is busy."""


class Lag:
    """How long batches waited between their reflector and the store, as a cumulative histogram (seconds)."""

    def __init__(self, bounds: tuple[float, ...] = LAG_BUCKETS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bound, then +Inf (not cumulative)
        self.sum_s = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[next((i for i, b in enumerate(self.bounds) if seconds <= b), len(self.bounds))] += 1
        self.sum_s += seconds
        self.count += 1

    def buckets(self) -> list[tuple[str, float]]:
        """(upper bound, cumulative count) pairs, ``+Inf`` last, as Prometheus histograms list them."""
        out, total = [], 0
        for bound, n in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            total += n
            out.append((bound, float(total)))
        return out


class LiveFeed:
    def __init__(
        self, api: ApiServer, store: ClusterStore, resources: Iterable[WatchedResource], **reflector_options: Any
    ) -> None:
        self.store = store
        self.reflectors = [Reflector(api, r, self._sink, **reflector_options) for r in resources]
        self._queue: deque[Batch] = deque()
        self._lock = threading.Lock()
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.applied = 0
        self.lag = Lag()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.store.ready = False
        for reflector in self.reflectors:
            reflector.start()

    def stop(self) -> None:
        for reflector in self.reflectors:
            reflector.stop()

    def status(self) -> dict[str, dict[str, object]]:
        """Per resource: where its reflector is, and whether its first list has arrived."""
        return {
            r.resource.name: {
                "state": r.state,
                "synced": r.synced,
                "version": r.version,
                "resourceVersion": r.resource_version,
                "lists": r.lists,
                "watches": r.watches,
                **({"lastError": r.last_error} if r.last_error else {}),
            }
            for r in self.reflectors
        }

    def served_version(self, group: str, kind: str) -> str:
        """The API version the feed found ``kind`` served in ("" until found, or where it is not served)."""
        for r in self.reflectors:
            if (r.resource.group, r.resource.kind) == (group, kind) and r.version:
                return r.version
        return ""

    def _sink(self, batch: Batch) -> None:
        with self._lock:
            self._queue.append(batch)
            if self._scheduled or self._loop is None:
                return
            self._scheduled = True
        self._loop.call_soon_threadsafe(self.drain)

    def drain(self) -> None:
        """Apply every batch that has arrived, in order (on the loop thread)."""
        with self._lock:
            batches = list(self._queue)
            self._queue.clear()
            self._scheduled = False
        now = time.monotonic()
        for batch in batches:
            self.lag.observe(now - batch.received)
            r = batch.resource
            if batch.relist is not None:
                self.store.replace_kind(r.group, r.kind, batch.relist)
            else:
                self.store.apply(batch.events)
            self.applied += len(batch.events) if batch.relist is None else len(batch.relist)
        if not self.store.ready and all(r.synced for r in self.reflectors):
            self.store.fleet()  # the first verb must not pay for it
            settle()
            self.store.ready = True


def list_cluster(api: ApiServer, resources: Iterable[WatchedResource]) -> list[Stored]:
    """Every object of these resources, listed once (what a command reads when pointed at a live cluster)."""
    out: list[Stored] = []
    for resource in resources:
        out.extend(Reflector(api, resource, lambda batch: None).list_once())
    return out
