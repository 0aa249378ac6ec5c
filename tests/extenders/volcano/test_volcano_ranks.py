"""Volcano's verbs hold each task of a gang to its own rank's node, read off the task's Pod (Kubeflow labels)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import GPU, Volcano, open_session, serve
from tests.extenders.volcano.test_volcano_http import R1, R2, node, predicate

ROLES = [("master", 0), ("worker", 0), ("worker", 1), ("worker", 2), ("worker", 3), ("worker", 4)]


@pytest.fixture
def volcano(tmp_path: Path) -> Iterator[Volcano]:
    yield from serve(tmp_path, [])


def pytorch_job() -> dict[str, Any]:
    """A PyTorchJob's pods under a Volcano PodGroup: a master and five workers of 4 GPUs, each with the Training
    Operator's replica type and index, and Volcano's task-spec role."""
    tasks = []
    for role, i in ROLES:
        labels = {"training.kubeflow.org/replica-type": role, "training.kubeflow.org/replica-index": str(i)}
        pod = vp.pod(
            "ml",
            f"pt-{role}-{i}",
            f"uid-pt-{role}-{i}",
            gpus=4,
            group="pt",
            labels=labels,
            annotations={vp.TASK_SPEC_KEY: role},
        )
        tasks.append(vp.task_info(pod))
    return vp.job_info(
        "ml", "pt", queue="ml-training", min_available=len(ROLES), tasks=tasks, min_resources={GPU: "24"}
    )


def task(job: dict[str, Any], role: str, i: int) -> dict[str, Any]:
    return next(t for t in job["Tasks"].values() if t["Name"] == f"pt-{role}-{i}")


def passing(v: Volcano, t: dict[str, Any]) -> list[str]:
    return [n for n in R1 + R2 if n != "r1-t05" and predicate(v, t, n)[0] == vp.SUCCESS]


def test_each_task_passes_only_on_its_ranks_node_scores_there_and_may_be_allocated_nowhere_else(
    volcano: Volcano,
) -> None:
    job = pytorch_job()
    open_session(volcano, [job])
    seats = {(role, i): passing(volcano, task(job, role, i)) for role, i in ROLES}
    assert all(len(nodes) == 1 for nodes in seats.values()), seats
    assert len({nodes[0] for nodes in seats.values()}) == len(ROLES)  # six tasks, six trays, one each
    assert volcano.app.volcano is not None
    plan = volcano.app.volcano.gangs.plan_of("ml/podgroup/pt")
    assert plan is not None
    by_rank = {(s.pod_set, s.rank): s.node for s in plan.slots}
    assert seats[("master", 0)] == [by_rank[("master-4", 0)]]
    assert [seats[("worker", i)][0] for i in range(5)] == [by_rank[("worker-4", i)] for i in range(5)]
    # nodeOrder's body carries the task with its Pod; the task's node alone scores.
    worker2 = task(job, "worker", 2)
    status, body = volcano.post("prioritize", vp.prioritize_args(worker2, [node(n) for n in R1 + R2]))
    assert status == 200 and [n for n, s in body["nodeScore"].items() if s == 100] == seats[("worker", 2)]
    # Allocating worker 2 onto worker 1's node is off its seat, and refused; onto its own it is booked.
    other = seats[("worker", 1)][0]
    _, body = volcano.post("allocateFunc", vp.task_args(dict(worker2, NodeName=other, Status=vp.ALLOCATED)))
    assert "outside the gang's plan" in body["errorMessage"]
    mine = seats[("worker", 2)][0]
    _, body = volcano.post("allocateFunc", vp.task_args(dict(worker2, NodeName=mine, Status=vp.ALLOCATED)))
    assert body == {"errorMessage": ""}
    assert next(s for s in plan.slots if s.node == mine).uid == worker2["UID"]
