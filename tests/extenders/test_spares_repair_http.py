"""A repair of a running gang takes a spare node in place, over real HTTP on 127.0.0.1: spares are kept for it.

Two idle GB200 NVL72 racks ``r1`` and ``r2`` (18 trays of 4 GPUs); the
ResourceFlavor ``gb200`` keeps 2 spare trays a rack. The gang ``train`` (16
pods, Job completion indices 0-15) runs on r1-t00..t15, as kilter planned it
(its pods carry the signed plan record): r1's spares are t16 and t17. Then
r1-t03 fails and the Job controller creates rank 3's replacement.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kilter.gangs.records import PLAN_ANNOTATION, PlanRecord, encode
from tests.extenders.conftest import names_args, pod_json
from tests.extenders.test_gang_repair_http import JOB_INDEX, KEYS, place, serving
from tests.extenders.test_spares_http import flavor, metric
from tests.topology.builders import CLIQUE, TIER1, node_dict

GANG = {"kilter.dev/gang": "train", "kilter.dev/gang-size": "16"}
NODES = [f"{r}-t{t:02d}" for r in ("r1", "r2") for t in range(18)]
RANK_NODE = NODES[:16]


def member(rank: int, *, replacement: bool = False) -> dict[str, Any]:
    name = f"train-{rank}" + ("-r" if replacement else "")
    pod = pod_json(
        name, 4, labels=GANG, annotations={JOB_INDEX: str(rank)}, node="" if replacement else RANK_NODE[rank]
    )
    if not replacement:
        record = PlanRecord("ml/gang/train", time.time() - 86400, tuple((n, 4) for n in RANK_NODE))
        pod["metadata"]["annotations"][PLAN_ANNOTATION] = encode(record, keys=KEYS, uid=pod["metadata"]["uid"])
    return pod


def cluster(failed: str) -> list[dict[str, Any]]:
    nodes = [
        node_dict(n, labels={CLIQUE: n[:2], TIER1: "leaf-a"}, cordoned=n == failed, ready=n != failed) for n in NODES
    ]
    survivors = [member(r) for r in range(16) if RANK_NODE[r] != failed]
    return [*nodes, *survivors, member(RANK_NODE.index(failed), replacement=True), flavor("2")]


@pytest.mark.parametrize("mode", ["snapshot", "live"])
def test_the_replacement_takes_its_racks_spare_and_the_next_idle_tray_is_held(mode: str, tmp_path: Path) -> None:
    with serving(mode, tmp_path, cluster("r1-t03")) as served:
        assert metric(served, "kilter_spare_nodes_held") == 4.0  # r1-t16, r1-t17, r2-t16, r2-t17
        # A new pod of 4 GPUs may not take r1's spares; the repair may, and stays in rack r1.
        _, lone = served.post("filter", names_args(pod_json("lone", 4), NODES))
        assert not {"r1-t16", "r1-t17"} & set(lone["NodeNames"])
        assert place(served, member(3, replacement=True)) == "r1-t16"
        # r1 now has one idle tray (t17), held; its second spare place is used by the repaired pod.
        assert metric(served, "kilter_spare_nodes_held") == 3.0
        assert metric(served, "kilter_spare_nodes_used") == 1.0


@pytest.mark.parametrize("spares", [True, False], ids=["2 spares a rack", "no spares"])
def test_spares_keep_a_new_gang_out_of_the_rack_a_repair_then_needs(spares: bool, tmp_path: Path) -> None:
    # A new 2-pod gang arrives before the replacement. Without spares it best-fits r1's two idle trays and rank 3
    # must leave its rack for r2; with them it goes to r2 and rank 3 stays home.
    other = {"kilter.dev/gang": "other", "kilter.dev/gang-size": "2"}
    newcomers = [pod_json(f"other-{i}", 4, labels=other) for i in range(2)]
    objects = [o for o in cluster("r1-t03") if spares or o["kind"] != "ResourceFlavor"]
    with serving("snapshot", tmp_path, [*objects, *newcomers]) as served:
        served.post("filter", names_args(newcomers[0], NODES))
        taken = {held.node[:2] for held in served.store.reservation("ml/gang/other")}
        assert taken == ({"r2"} if spares else {"r1"})
        assert place(served, member(3, replacement=True))[:2] == ("r1" if spares else "r2")
