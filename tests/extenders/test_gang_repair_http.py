"""A running 64-pod gang loses nodes; its replacement pods land beside the survivors, each on its own rank's slot.

Over real HTTP on 127.0.0.1, from a snapshot file and from a live cluster
kilter lists and watches. The gang (label gang ``train``, Job completion
indices 0-63, 4 GPUs a pod) runs on racks r1-r3 (18 trays each) and ten
trays of r4, all under leaf ``leaf-a``; r5 and r6 (leaf ``leaf-b``) are idle.
Its pods carry the plan record kilter wrote when it placed them. Nodes then
fail (cordoned, their pods gone), the Job controller creates replacements
with the same indices, and kube-scheduler asks about them in any order.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from kilter.gangs.keys import PlanKeys
from kilter.gangs.records import PLAN_ANNOTATION, PlanRecord, decode, encode
from tests.extenders.conftest import Served, _Server, names_args, pod_json, serve_config, serve_snapshot
from tests.listwatch import PODS
from tests.live_mode import live_cluster, wait_ready
from tests.topology.builders import CLIQUE, TIER1, node_dict

JOB_INDEX = "batch.kubernetes.io/job-completion-index"
GANG = {"kilter.dev/gang": "train", "kilter.dev/gang-size": "64"}
KEY = "ml/gang/train"
KEY_TEXT = "5eed" * 16
KEYS = PlanKeys([KEY_TEXT.encode()], source="test")
RACKS = {"r1": "leaf-a", "r2": "leaf-a", "r3": "leaf-a", "r4": "leaf-a", "r5": "leaf-b", "r6": "leaf-b"}
NODES = [f"{r}-t{t:02d}" for r in RACKS for t in range(18)]
RANK_NODE = NODES[:64]  # rank i runs on NODES[i]: r1-r3 whole, r4-t00..t09
PLANNED_AT = time.time() - 7 * 86400  # a week ago: far past the gang timeout, as for any long-running gang


def node_objects(failed: set[str]) -> list[dict[str, Any]]:
    return [
        node_dict(n, labels={CLIQUE: n[:2], TIER1: RACKS[n[:2]]}, cordoned=n in failed, ready=n not in failed)
        for n in NODES
    ]


def member(rank: int, *, replacement: bool = False) -> dict[str, Any]:
    name = f"train-{rank}" + ("-r" if replacement else "")
    node = "" if replacement else RANK_NODE[rank]
    pod = pod_json(name, 4, labels=GANG, annotations={JOB_INDEX: str(rank)}, node=node)
    if not replacement:  # the record kilter wrote on each pod when it planned the gang, signed for the pod's UID
        record = PlanRecord(KEY, PLANNED_AT, tuple((n, 4) for n in RANK_NODE))
        pod["metadata"]["annotations"][PLAN_ANNOTATION] = encode(record, keys=KEYS, uid=pod["metadata"]["uid"])
    return pod


def after_failure(failed_ranks: list[int]) -> list[dict[str, Any]]:
    failed = {RANK_NODE[r] for r in failed_ranks}
    survivors = [member(r) for r in range(64) if r not in failed_ranks]
    return [*node_objects(failed), *survivors, *(member(r, replacement=True) for r in failed_ranks)]


@contextlib.contextmanager
def serving(mode: str, tmp_path: Path, objects: list[dict[str, Any]]) -> Iterator[Served]:
    keys = tmp_path / "plan-keys"
    keys.write_text(KEY_TEXT + "\n")
    if mode == "snapshot":
        with serve_snapshot(tmp_path, objects, plan_key_file=keys) as served:
            yield served
        return
    with live_cluster(tmp_path, objects) as cluster, restartable(cluster, tmp_path, keys) as served:
        yield served


@contextlib.contextmanager
def restartable(cluster: Any, tmp_path: Path, keys: Path, name: str = "kilter") -> Iterator[Served]:
    app, store = build_app(serve_config(None, kubeconfig=cluster.kubeconfig, plan_key_file=keys))
    with _Server(app, None) as port:
        wait_ready(store)
        yield Served(app, store, None, port, cluster=cluster)


def place(served: Served, pod: dict[str, Any]) -> str:
    """Filter the pod against every node (as kube-scheduler does), check it is held to one node, bind it there."""
    status, answer = served.post("filter", names_args(pod, NODES))
    assert status == 200 and answer["Error"] == "", answer
    assert len(answer["NodeNames"]) == 1, answer["NodeNames"]
    node: str = answer["NodeNames"][0]
    meta = pod["metadata"]
    body = {"PodName": meta["name"], "PodNamespace": "ml", "PodUID": meta["uid"], "Node": node}
    status, bound = served.post("bind", body)
    assert status == 200 and bound == {"Error": ""}, bound
    return node


def explained(served: Served, pod: str) -> str:
    status, body, _ = served.call("GET", f"/debug/explain?namespace=ml&pod={pod}")
    assert status == 200
    return json.dumps(json.loads(body))


CASES = {
    "1 node": [57],
    "2 nodes": [55, 61],
    "5 nodes, one in a full rack": [55, 57, 59, 61, 20],
}


@pytest.mark.parametrize("mode", ["snapshot", "live"])
@pytest.mark.parametrize("case", list(CASES))
def test_replacements_land_beside_the_survivors_each_on_its_own_rank(mode: str, case: str, tmp_path: Path) -> None:
    failed = CASES[case]
    with serving(mode, tmp_path, after_failure(failed)) as served:
        order = list(failed)
        random.Random(len(failed)).shuffle(order)
        landed = {rank: place(served, member(rank, replacement=True)) for rank in order}
        assert len(set(landed.values())) == len(failed), "two replacements on one node"
        for rank, node in landed.items():
            old = RANK_NODE[rank]
            # r4 has eight idle trays: every replacement fits there, next to its rank's neighbours.
            assert node.startswith("r4-") and node not in RANK_NODE, (rank, node)
            why = explained(served, f"train-{rank}-r")
            assert f"replaced {old} by {node} in domain r4, rank {rank} of pod set pods" in why
            how = "same scale-up domain" if old.startswith("r4-") else "a domain the gang uses, same"
            assert how in why, why
        # Each replacement took its own rank's slot: the plan lists rank i where replacement i went.
        assert served.app.extender.gangs.open_count() == 0  # every slot bound
        assert served.app.extender.gangs.planned == 1


def test_a_restart_between_failure_and_replacement_continues_the_same_repair(tmp_path: Path) -> None:
    failed = [55, 57, 59, 61, 20]
    keys = tmp_path / "plan-keys"
    keys.write_text(KEY_TEXT + "\n")
    with live_cluster(tmp_path, after_failure(failed)) as cluster:
        with restartable(cluster, tmp_path, keys) as first:
            first_node = place(first, member(20, replacement=True))
            plan = first.app.extender.gangs.plan_of(KEY)
            assert plan is not None
            assert plan.origin == "repair"
            chosen = {s.rank: s.node for s in plan.slots if s.rank in failed}

            def recorded() -> PlanRecord | None:
                pod = cluster.server.get_object(PODS, "ml", "train-55-r")
                raw = (pod["metadata"].get("annotations") or {}).get(PLAN_ANNOTATION)
                return decode(raw, where="test") if raw else None

            deadline = time.monotonic() + 15
            while recorded() is None:
                assert time.monotonic() < deadline, "the repair plan was not recorded"
                time.sleep(0.02)
            record = recorded()
            assert record is not None and [n for n, _ in record.slots][55] == chosen[55]
            # The record says what the repair replaced by what, slot by slot (here slot = rank).
            assert {slot: (was, record.slots[slot][0]) for slot, was, _ in record.repaired} == {
                rank: (RANK_NODE[rank], chosen[rank]) for rank in failed
            }
        assert first_node == chosen[20]
        with restartable(cluster, tmp_path, keys, "kilter-2") as second:
            for rank in (61, 55, 59, 57):
                assert place(second, member(rank, replacement=True)) == chosen[rank]
            assert second.app.extender.gangs.adopted == 1
            # The restarted kilter's filter record tells the repair as the first one made it.
            told = explained(second, "train-55-r")
            assert f"replaced {RANK_NODE[55]} by {chosen[55]}" in told and "rank 55 of pod set" in told
