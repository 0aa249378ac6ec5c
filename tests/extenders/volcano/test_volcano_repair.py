"""Volcano's verbs repair a running 64-task gang beside its survivors, each replacement on its own rank's node.

The job: a PyTorchJob's 64 workers (Training Operator replica index 0-63, 4
GPUs each) under PodGroup ``ml/pt``, running on racks r3-r5 (18 trays each)
and ten trays of r6, all under leaf ``leaf-c``; the PodGroup carries the plan
record kilter wrote when it placed them. Then nodes fail and Volcano's
session shows the replacement tasks pending beside the 63, 62 or 59 tasks
still running. Snapshot and live modes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.gangs.keys import PlanKeys
from kilter.gangs.records import PLAN_ANNOTATION, PlanRecord, encode
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import GPU, Volcano, serve
from tests.topology.builders import CLIQUE, TIER1, node_dict

KEY_TEXT = "ab" * 32
KEYS = PlanKeys([KEY_TEXT.encode()], source="test")
RACKS = ("r3", "r4", "r5", "r6")
NODES = [f"{r}-t{t:02d}" for r in RACKS for t in range(18)]
RANK_NODE = NODES[:64]
PG_UID = "uid-pg-pt"


def fleet_objects(failed: set[str]) -> list[dict[str, Any]]:
    nodes = [
        node_dict(n, labels={CLIQUE: n[:2], TIER1: "leaf-c"}, cordoned=n in failed, ready=n not in failed)
        for n in NODES
    ]
    record = PlanRecord("ml/podgroup/pt", time.time() - 3 * 86400, tuple((n, 4) for n in RANK_NODE))
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "pt",
            "namespace": "ml",
            "uid": PG_UID,
            "annotations": {PLAN_ANNOTATION: encode(record, keys=KEYS, uid=PG_UID)},
        },
        "spec": {"minMember": 64, "queue": "ml-training", "minResources": {GPU: "256"}},
        "status": {"phase": "Running", "running": 64 - len(failed)},
    }
    survivors = [worker_pod(r) for r in range(64) if RANK_NODE[r] not in failed]
    return [*nodes, group, *survivors]


def worker_pod(rank: int, *, replacement: bool = False) -> dict[str, Any]:
    """The worker's Pod as the API server holds it (the informer's copy lacks only kind and apiVersion)."""
    name = f"pt-worker-{rank}" + ("-r" if replacement else "")
    labels = {"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": str(rank)}
    node = "" if replacement else RANK_NODE[rank]
    notes = {vp.TASK_SPEC_KEY: "worker"}
    pod = vp.pod("ml", name, f"uid-{name}", gpus=4, group="pt", labels=labels, annotations=notes, node_name=node)
    return {"apiVersion": "v1", "kind": "Pod", **pod}


def worker(rank: int, *, replacement: bool = False) -> dict[str, Any]:
    pod = worker_pod(rank, replacement=replacement)
    node = pod["spec"].get("nodeName") or None
    return vp.task_info(pod, status=vp.PENDING if replacement else vp.RUNNING, node_name=node)


def job(failed: list[int]) -> dict[str, Any]:
    tasks = [worker(r) for r in range(64) if r not in failed] + [worker(r, replacement=True) for r in failed]
    return vp.job_info("ml", "pt", queue="ml-training", min_available=64, tasks=tasks, min_resources={GPU: "256"})


def node_info(name: str, used: int) -> dict[str, Any]:
    return vp.node_info(name, gpus=4, used_gpus=used, labels={CLIQUE: name[:2], TIER1: "leaf-c"})


def passing(v: Volcano, task: dict[str, Any], used: dict[str, int], down: set[str]) -> list[str]:
    out = []
    for name in NODES:
        if name in down:
            continue
        status, body = v.post("predicate", vp.predicate_args(task, node_info(name, used.get(name, 0))))
        assert status == 200, body
        if body["code"] == vp.SUCCESS:
            out.append(name)
    return out


@pytest.fixture(params=["snapshot", "live"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def volcano_over(tmp_path: Path, failed: list[int], mode: str) -> Iterator[Volcano]:
    keys = tmp_path / "plan-keys"
    keys.write_text(KEY_TEXT + "\n")
    down = {RANK_NODE[r] for r in failed}
    yield from serve(tmp_path, fleet_objects(down), mode=mode, plan_key_file=keys)


CASES = {"1 node": [57], "2 nodes": [55, 61], "5 nodes, one in a full rack": [55, 57, 59, 61, 20]}


@pytest.mark.parametrize("case", list(CASES))
def test_each_replacement_task_passes_only_beside_the_survivors_on_its_own_rank(
    case: str, mode: str, tmp_path: Path
) -> None:
    failed = CASES[case]
    down = {RANK_NODE[r] for r in failed}
    used = {RANK_NODE[r]: 4 for r in range(64) if r not in failed}
    for v in volcano_over(tmp_path, failed, mode):
        the_job = job(failed)
        nodes = [node_info(n, used.get(n, 0)) for n in NODES if n not in down]
        queues = [vp.queue_info("ml-training")]
        status, _ = v.post("onSessionOpen", vp.session_open_args([the_job], nodes, queues))
        assert status == 200
        order = list(failed)
        random.Random(len(failed)).shuffle(order)
        landed = {}
        for rank in order:
            task = next(t for t in the_job["Tasks"].values() if t["Name"] == f"pt-worker-{rank}-r")
            seats = passing(v, task, used, down)
            assert len(seats) == 1, (rank, seats)
            landed[rank] = seats[0]
            _, body = v.post("allocateFunc", vp.task_args(dict(task, NodeName=seats[0], Status=vp.ALLOCATED)))
            assert body == {"errorMessage": ""}
            used[seats[0]] = 4
        assert len(set(landed.values())) == len(failed)
        assert all(node.startswith("r6-") and node not in RANK_NODE for node in landed.values()), landed
        assert v.app.volcano is not None
        plan = v.app.volcano.gangs.plan_of("ml/podgroup/pt")
        if plan is not None:  # still open in the book: its repaired ranks are where the tasks went
            assert {r.place.rank: r.now for r in plan.repaired if r.place is not None} == landed
        assert v.app.volcano.gangs.planned == 1
