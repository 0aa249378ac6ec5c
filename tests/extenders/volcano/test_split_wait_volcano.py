"""Volcano's predicate over loopback: a preferred PodGroup that fits only split waits for fewer domains, saying so.

The scenario's fleet (``tests.extenders.conftest.cluster_objects``) with every
tray busy but ``r1-t00``, ``r1-t01``, ``r2-t02`` and ``r2-t03``: a gang of
four 4-GPU tasks fits rack r1 when idle (17 usable trays) but two racks now.
Its PodGroup declares 10 h and was made 10 min 30 s ago: of its 2 h budget,
1 h 49 min 30 s are left.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extenders.conftest import pod_json
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano, gpu_job, open_session, serve, task_of
from tests.gangs.wait_scenario import stamp
from tests.topology.builders import CLIQUE

FREE = ["r1-t00", "r1-t01", "r2-t02", "r2-t03"]
NODES = [f"{rack}-t{t:02d}" for rack in ("r1", "r2") for t in range(18)]
REASON = "waiting up to 1h50m for room in 1 domain; 2 available now"


def busy() -> list[dict[str, Any]]:
    taken = {"r1-t05", "r2-t00", "r2-t01", *FREE}  # cordoned, and the scenario's own busy and half-busy trays
    return [pod_json(f"busy-{n}", 4, node=n) for n in NODES if n not in taken]


def podgroup(name: str, annotations: dict[str, str]) -> list[dict[str, Any]]:
    """The PodGroup and its four pending pods as kilter's state holds them (made 10 min 30 s ago)."""
    made = stamp(math.floor(time.time()) - 630)
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"pg-{name}",
            "creationTimestamp": made,
            "annotations": annotations,
        },
        "spec": {"minMember": 4, "queue": "ml-training"},
        "status": {"phase": "Inqueue"},
    }
    pods = [pod_json(f"{name}-{i}", 4, annotations={"scheduling.k8s.io/group-name": name}) for i in range(4)]
    for pod in pods:
        pod["metadata"]["creationTimestamp"] = made
    return [group, *pods]


@pytest.fixture
def volcano(tmp_path: Path) -> Iterator[Volcano]:
    extra = [
        *busy(),
        *podgroup("train", {"kilter.dev/expected-runtime": "10h"}),
        *podgroup("eager", {"kilter.dev/expected-runtime": "10h", "kilter.dev/split-wait": "0"}),
    ]
    yield from serve(tmp_path, extra)


def predicate(v: Volcano, task: dict[str, Any], name: str) -> tuple[int, str]:
    node = vp.node_info(name, gpus=4, labels={CLIQUE: name.split("-")[0]})
    status, body = v.post("predicate", vp.predicate_args(task, node))
    assert status == 200
    return body["code"], body["status"]


def test_every_node_is_unschedulable_with_the_wait_while_the_podgroup_waits(volcano: Volcano) -> None:
    gang = gpu_job("train", 4, 4)
    open_session(volcano, [gang])
    for i in (0, 3):
        answers = {predicate(volcano, task_of(gang, i), n) for n in ["r1-t00", "r2-t02", "r1-t17"]}
        assert answers == {(vp.UNSCHEDULABLE, REASON)}  # Volcano's Unschedulable: time may change it
    status, data, _ = volcano.call("GET", "/debug/volcano?job=ml/train")
    assert status == 200 and json.loads(data)["decisions"]["wait"] == REASON
    status, body, _ = volcano.call("GET", "/metrics")
    assert "kilter_gangs_waiting_for_domains 1.0" in body.decode()


def test_a_podgroup_that_turns_waiting_off_is_placed_split(volcano: Volcano) -> None:
    gang = gpu_job("eager", 4, 4)
    open_session(volcano, [gang])
    passing = [n for n in NODES if predicate(volcano, task_of(gang), n)[0] == vp.SUCCESS]
    assert passing == FREE
