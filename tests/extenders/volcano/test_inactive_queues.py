"""A cohort cycle over real HTTP: Volcano jobs of a queue bound to a ClusterQueue under it are refused, and said so.

Kueue marks the ClusterQueues under a cohort cycle inactive (``Active:
False``, reason ``CohortCycleDetected``) and admits nothing to them. Before,
kilter's Volcano verbs abstained for their jobs ("bound to no ClusterQueue
kilter knows"), so Volcano went on without any quota at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from tests.extenders.conftest import _Server, cluster_objects, serve_config, write_snapshot
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano, gpu_job, open_session, quota_objects, task_of

INACTIVE = "ClusterQueue training is inactive (CohortCycleDetected)"


def cycle_objects() -> list[dict[str, Any]]:
    """quota_objects with cohort pool (training's and research's) on a cycle pool -> loop -> pool."""
    objects = quota_objects()
    for obj in objects:
        if obj["kind"] == "Cohort" and obj["metadata"]["name"] == "pool":
            obj["spec"] = {"parentName": "loop"}
    loop = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "loop"}}
    return [*objects, {**loop, "spec": {"parentName": "pool"}}]


@pytest.fixture
def volcano(tmp_path: Path) -> Iterator[Volcano]:
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, [*cluster_objects(), *cycle_objects()])
    app, _ = build_app(serve_config(snapshot))
    with _Server(app, None) as port:
        yield Volcano(app, port)


def test_a_job_of_a_queue_bound_to_a_cluster_queue_under_a_cycle_is_refused_with_the_reason(volcano: Volcano) -> None:
    job = gpu_job("small", 1, 4)  # 4 GPUs: would fit training's 64 at once
    open_session(volcano, [job])
    assert volcano.post("jobEnqueueable", vp.job_args(job)) == (200, {"status": -1})
    status, data, _ = volcano.call("GET", "/debug/volcano?job=ml/small")
    assert status == 200 and INACTIVE.encode() in data and b"has a cycle in hierarchy" in data


def test_the_queue_of_an_inactive_cluster_queue_is_overused_and_takes_no_task(volcano: Volcano) -> None:
    job = gpu_job("late", 1, 4, min_resources=False, phase="Inqueue")  # enqueued without asking kilter
    open_session(volcano, [job])
    queue = vp.queue_info("ml-training", annotations={"kilter.dev/cluster-queue": "training"})
    assert volcano.post("queueOverused", vp.queue_args(queue)) == (200, {"overused": True})
    task = dict(task_of(job), NodeName="r1-t00", Status=vp.ALLOCATED)
    status, body = volcano.post("allocateFunc", vp.task_args(task))
    assert status == 200 and INACTIVE in body["errorMessage"]
    evictees = [task_of(job)]
    status, body = volcano.post("reclaimable", vp.evict_args(task_of(job), evictees))
    assert (status, body) == (200, {"status": -1, "victims": []})


def test_queues_bound_to_nothing_are_still_left_to_volcano(volcano: Volcano) -> None:
    job = gpu_job("free", 2, 4, queue="scratch")
    open_session(volcano, [job])
    assert volcano.post("jobEnqueueable", vp.job_args(job)) == (200, {"status": 0})


def test_readyz_names_the_inactive_cluster_queues(volcano: Volcano) -> None:
    status, body, _ = volcano.call("GET", "/readyz")
    lines = body.decode().splitlines()
    assert status == 200 and lines[0] == "ok"
    assert [line.split(" inactive")[0] for line in lines[1:]] == ["ClusterQueue research", "ClusterQueue training"]
    assert all("CohortCycleDetected" in line for line in lines[1:])
