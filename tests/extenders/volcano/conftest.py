"""A real ``kilter serve`` on 127.0.0.1 with Kueue quota and Volcano queues, posted to as Volcano posts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from kilter.extenders.server import App
from tests.extenders.conftest import _Server, cluster_objects, serve_config, write_snapshot
from tests.extenders.volcano import payloads as vp
from tests.live_mode import live_cluster, wait_ready

GPU = "nvidia.com/gpu"


def cluster_queue(
    name: str, nominal: int, *, borrowing: int | None = None, lending: int | None = None
) -> dict[str, Any]:
    quota: dict[str, Any] = {"name": GPU, "nominalQuota": str(nominal)}
    if borrowing is not None:
        quota["borrowingLimit"] = str(borrowing)
    if lending is not None:
        quota["lendingLimit"] = str(lending)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": "pool",
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": "gb200", "resources": [quota]}]}],
        },
    }


def volcano_queue(name: str, *, cluster_queue: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if cluster_queue:
        meta["annotations"] = {"kilter.dev/cluster-queue": cluster_queue}
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": meta, "spec": {"weight": 1}}


def quota_objects() -> list[dict[str, Any]]:
    """Cohort pool: ClusterQueue training (64 GPUs, may borrow 32) and research (32); three Volcano queues."""
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "pool"}, "spec": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gb200"}, "spec": {}},
        cluster_queue("training", 64, borrowing=32),
        cluster_queue("research", 32),
        volcano_queue("ml-training", cluster_queue="training"),
        volcano_queue("research"),
        volcano_queue("scratch"),
    ]


@dataclass
class Volcano:
    """The served app and a client that posts bodies the way Volcano's extender plugin does."""

    app: App
    port: int

    def post(self, verb: str, body: Any, *, prefix: str = "/volcano/") -> tuple[int, Any]:
        raw = vp.to_go_json(body) if not isinstance(body, bytes) else body
        status, data, _ = self.call("POST", prefix + verb, raw)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data.decode()

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes, Any]:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body, {"Content-Type": "application/json"} if body is not None else {})
            response = conn.getresponse()
            return response.status, response.read(), response
        finally:
            conn.close()


def serve(
    tmp_path: Path, extra: list[dict[str, Any]], *, mode: str = "snapshot", **overrides: Any
) -> Iterator[Volcano]:
    """kilter serve over the fleet, the quota objects and ``extra``: from a snapshot, or listed from a live cluster."""
    objects = [*cluster_objects(), *quota_objects(), *extra]
    if mode == "live":
        with live_cluster(tmp_path, objects) as cluster:
            app, store = build_app(serve_config(None, kubeconfig=cluster.kubeconfig, **overrides))
            with _Server(app, None) as port:
                wait_ready(store)
                yield Volcano(app, port)
        return
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, objects)
    app, _ = build_app(serve_config(snapshot, **overrides))
    with _Server(app, None) as port:
        yield Volcano(app, port)


@pytest.fixture(params=["snapshot", "live"])
def volcano(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Volcano]:
    """The scenario's cluster as a snapshot file, and again as a live cluster kilter lists and watches."""
    yield from serve(tmp_path, [], mode=request.param)


def gpu_job(
    name: str,
    pods: int,
    gpus: int,
    *,
    queue: str = "ml-training",
    min_resources: bool = True,
    phase: str = "Pending",
    running_on: list[str] | None = None,
    priority: int = 0,
    network_topology: dict[str, Any] | None = None,
    version: vp.VolcanoVersion = "head",
) -> dict[str, Any]:
    """A JobInfo of ``pods`` tasks of ``gpus`` GPUs; the first ``len(running_on)`` run on those nodes."""
    running_on = running_on or []
    tasks = []
    for i in range(pods):
        node = running_on[i] if i < len(running_on) else ""
        pod = vp.pod("ml", f"{name}-{i}", f"uid-{name}-{i}", gpus=gpus, group=name, node_name=node, priority=priority)
        tasks.append(vp.task_info(pod, version=version))
    return vp.job_info(
        "ml",
        name,
        queue=queue,
        min_available=pods,
        tasks=tasks,
        priority=priority,
        min_resources={GPU: str(pods * gpus)} if min_resources else None,
        phase=phase,
        network_topology=network_topology,
        version=version,
    )


def task_of(job: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return next(t for t in job["Tasks"].values() if t["Name"].endswith(f"-{i}"))


def open_session(v: Volcano, jobs: list[dict[str, Any]], *, version: vp.VolcanoVersion = "head") -> None:
    queues = [
        vp.queue_info("ml-training", annotations={"kilter.dev/cluster-queue": "training"}, version=version),
        vp.queue_info("research", version=version),
        vp.queue_info("scratch", version=version),
    ]
    status, _ = v.post("onSessionOpen", vp.session_open_args(jobs, [], queues))
    assert status == 200
