"""The extender holds each pod of an indexed gang to its own rank's node, over real HTTP with kube-scheduler's bodies.

The cluster is the scenario's two NVL72 racks with r1's trays t00-t09 busy: r1 keeps 8 idle trays, r2 16 (less
its full t00 and half-used t01), so a gang of 20 four-GPU pods spans both racks.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from tests.extenders.conftest import Served, cluster_objects, names_args, pod_json, serve_snapshot
from tests.extenders.test_extender_http import RACK1, RACK2, bind

EVERYTHING = [*RACK1, *RACK2]
JOB = "batch.kubernetes.io/job-completion-index"


def member(i: int, *, size: int = 20, name: str = "", node: str = "") -> dict[str, Any]:
    """Pod ``i`` of an indexed Job whose pods are the label gang ``train``."""
    labels = {"kilter.dev/gang": "train", "kilter.dev/gang-size": str(size), "batch.kubernetes.io/job-name": "train"}
    return pod_json(name or f"train-{i}", 4, labels=labels, annotations={JOB: str(i)}, node=node)


def cluster(*extra: dict[str, Any], size: int = 20) -> list[dict[str, Any]]:
    busy = [pod_json(f"busy-{t}", 4, node=f"r1-t{t:02d}") for t in range(10)]
    return [*cluster_objects(), *busy, *(member(i, size=size) for i in range(size)), *extra]


def wait_for(served: Served, uid: str) -> None:
    deadline = time.monotonic() + 10
    while served.store.pod(uid) is None:
        assert time.monotonic() < deadline, "the snapshot was not reloaded"
        time.sleep(0.05)


def test_each_pod_is_filtered_to_its_ranks_node_scored_there_and_bound_there(tmp_path: Any) -> None:
    with serve_snapshot(tmp_path, cluster()) as served:
        _, first = served.post("filter", names_args(member(13), EVERYTHING))
        plan = served.app.extender.gangs.plan_of("ml/gang/train")
        assert plan is not None
        of_rank = [s.node for s in sorted(plan.slots, key=lambda s: s.rank if s.rank is not None else -1)]
        assert [s.rank for s in plan.slots] == list(range(20))
        assert first["NodeNames"] == [of_rank[13]]
        held = first["FailedAndUnresolvableNodes"][of_rank[12]]
        assert "holds this pod to its gang's plan" in held and f"holds rank 13 of pod set pods on {of_rank[13]}" in held
        _, scores = served.post("prioritize", names_args(member(13), EVERYTHING))
        assert [h["Host"] for h in scores if h["Score"] == 10] == [of_rank[13]]
        _, explained, _ = served.call("GET", "/debug/explain?namespace=ml&pod=train-13")
        summary = next(d["summary"] for d in json.loads(explained)["decisions"] if d["verb"] == "filter")
        assert f"holds rank 13 of pod set pods on {of_rank[13]}" in summary
        # The scheduler takes the pods in any order; each one may go to its own rank's node only, and binds there.
        order = list(range(20))
        random.Random(18).shuffle(order)
        for i in order:
            _, result = served.post("filter", names_args(member(i), EVERYTHING))
            assert result["NodeNames"] == [of_rank[i]], i
            assert bind(served, member(i), of_rank[i]) == {"Error": ""}
        assert served.app.extender.gangs.open_count() == 0  # every slot bound
    racks = [n.split("-")[0] for n in of_rank]
    assert len(set(racks)) == 2 and racks == sorted(racks)  # rank 0 first; each rack one range of ranks


def test_a_second_live_pod_with_one_index_may_take_any_free_slot_and_is_told_whose_the_rank_is(tmp_path: Any) -> None:
    objects = cluster(size=4)
    with serve_snapshot(tmp_path, objects) as served:
        served.post("filter", names_args(member(0, size=4), EVERYTHING))
        plan = served.app.extender.gangs.plan_of("ml/gang/train")
        assert plan is not None
        nodes = [s.node for s in plan.slots]
        assert bind(served, member(2, size=4), nodes[2]) == {"Error": ""}
        twin = member(2, size=4, name="train-2-twin")
        served.replace([*objects, twin])
        wait_for(served, "uid-train-2-twin")
        _, result = served.post("filter", names_args(twin, EVERYTHING))
        assert result["NodeNames"] == [nodes[0], nodes[1], nodes[3]]  # never waits for a slot that is not free
        why = result["FailedAndUnresolvableNodes"][nodes[2]]
        assert "rank 2 of pod set pods is held by pod ml/train-2" in why and "any free slot of its shape" in why


def test_a_gang_whose_pods_differ_in_gpus_is_planned_and_held_in_its_real_shapes(tmp_path: Any) -> None:
    gang = {"kilter.dev/gang": "mix", "kilter.dev/gang-size": "4"}
    leader = pod_json("mix-lead", 4, labels=gang)
    workers = [pod_json(f"mix-w{i}", 2, labels=gang) for i in range(3)]
    with serve_snapshot(tmp_path, [*cluster_objects(), leader, *workers]) as served:
        _, first = served.post("filter", names_args(workers[0], EVERYTHING))
        plan = served.app.extender.gangs.plan_of("ml/gang/mix")
        assert plan is not None
        assert sorted(s.gpus for s in plan.slots) == [2, 2, 2, 4]  # not four pods of the asker's 2 GPUs
        two = sorted({s.node for s in plan.slots if s.gpus == 2})
        assert first["NodeNames"] == two
        _, lead = served.post("filter", names_args(leader, EVERYTHING))
        assert lead["NodeNames"] == [next(s.node for s in plan.slots if s.gpus == 4)]
