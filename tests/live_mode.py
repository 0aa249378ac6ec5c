"""Scenarios written against a snapshot, run against a live cluster: the same objects in the list/watch test server.

``kilter serve --kubeconfig`` lists and watches the server; a scenario that
changes the cluster does it through the API (``replace``), and a pod the
scheduler asks about exists in the cluster first (``ensure_pod``), as it
does in a real one: kube-scheduler only schedules pods the API server holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kilter.state.store import ClusterStore
from tests.listwatch import COMPUTE_DOMAINS, NODES, PDBS, PODS, ListWatchServer, Resource

TOKEN = "live-mode"
Obj = dict[str, Any]
Key = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name)

STATUS_KINDS = ("Workload", "AdmissionCheck")  # Kueue's kinds with a status subresource that kilter writes

RESOURCES = [
    PODS,
    NODES,
    *(
        Resource("kueue.x-k8s.io", "v1beta2", plural, kind, namespaced=namespaced, status=kind in STATUS_KINDS)
        for plural, kind, namespaced in (
            ("topologies", "Topology", False),
            ("resourceflavors", "ResourceFlavor", False),
            ("clusterqueues", "ClusterQueue", False),
            ("cohorts", "Cohort", False),
            ("localqueues", "LocalQueue", True),
            ("workloads", "Workload", True),
            ("admissionchecks", "AdmissionCheck", False),
            ("workloadpriorityclasses", "WorkloadPriorityClass", False),
        )
    ),
    Resource("scheduling.volcano.sh", "v1beta1", "queues", "Queue", namespaced=False),
    Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", namespaced=True),
    Resource("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", namespaced=False),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False),
    COMPUTE_DOMAINS,
    PDBS,
]


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"]


def _plural(api_version: str, kind: str) -> tuple[str, str]:
    group = api_version.rpartition("/")[0]
    for r in RESOURCES:
        if (r.group, r.kind) == (group, kind):
            return group, r.plural
    raise KeyError(f"{api_version} {kind} is not served by the live-mode cluster")


def kubeconfig(path: Path, port: int, token: str, host: str = "127.0.0.1") -> Path:
    """A kubeconfig for the test server: plain HTTP on ``host`` (127.0.0.1; a bridge's address for a network
    namespace), a bearer token."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": f"http://{host}:{port}"}}],
                "users": [{"name": "kilter", "user": {"token": token}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "kilter"}}],
                "current-context": "test",
            }
        )
    )
    return path


class LiveCluster:
    """The test server holding a scenario's objects, changed the way a scenario's snapshot would be rewritten."""

    def __init__(self, server: ListWatchServer, kubeconfig: Path) -> None:
        self.server = server
        self.kubeconfig = kubeconfig
        self.held: dict[Key, Obj] = {}
        self.changed: dict[Key, str | None] = {}  # by the last replace: the version written, None if deleted

    def replace(self, objects: list[Obj], *, seen_by: ClusterStore | None = None) -> None:
        """Make the cluster hold exactly ``objects`` (deletes, updates and creates through the server); with
        ``seen_by``, until that store shows it."""
        wanted = {_key(o): o for o in objects}
        self.changed = {}
        for key in [k for k in self.held if k not in wanted]:
            group, plural = _plural(key[0], key[1])
            self.server.delete(group, plural, key[2] or None, key[3])
            del self.held[key]
            self.changed[key] = None
        for key, obj in wanted.items():
            if key not in self.held:
                self.changed[key] = self.server.add(obj)["metadata"]["resourceVersion"]
            elif self.held[key] != obj:
                self.changed[key] = self.server.update(obj)["metadata"]["resourceVersion"]
            self.held[key] = obj
        if seen_by is not None:
            settled(lambda: self.reached(seen_by))

    def reached(self, store: ClusterStore) -> bool:
        """The store shows the last ``replace``: what it deleted is gone, what it wrote is there at that version."""
        for (api_version, kind, namespace, name), version in self.changed.items():
            group = api_version.rpartition("/")[0]
            if (group, kind) == ("", "Node"):
                held: Any = store.node_named(name)
                seen = held.metadata.resource_version if held is not None else None
            elif (group, kind) == ("", "Pod"):
                held = store.pod_named(namespace, name)
                seen = held.metadata.resource_version if held is not None else None
            else:
                held = store.get(group, kind, namespace, name)
                seen = (held.get("metadata") or {}).get("resourceVersion") if held is not None else None
            if seen != version:
                return False
        return True

    def ensure_pod(self, pod: Obj) -> None:
        """Create the pod if the cluster does not hold it yet."""
        pod = {"apiVersion": "v1", "kind": "Pod", **pod}
        if _key(pod) not in self.held:
            self.server.add(pod)
            self.held[_key(pod)] = pod


@contextmanager
def live_cluster(tmp_path: Path, objects: list[Obj]) -> Iterator[LiveCluster]:
    with ListWatchServer(RESOURCES, token=TOKEN) as server:
        cluster = LiveCluster(server, kubeconfig(tmp_path / "kubeconfig", server.port, TOKEN))
        cluster.replace(objects)
        yield cluster


def wait_ready(store: ClusterStore, timeout_s: float = 20) -> None:
    """Until kilter has listed every resource (what ``/readyz`` waits for)."""
    deadline = time.monotonic() + timeout_s
    while not store.ready:
        if time.monotonic() > deadline:
            raise AssertionError("kilter did not list the live cluster in time")
        time.sleep(0.02)


def settled(condition: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the change did not reach kilter in time")
        time.sleep(0.02)
