"""A repair that takes a lent spare back chooses its victims as few and as low as it can: on the chosen tray, the
borrowers of lowest priority first, only until the replacement's GPUs are free; never a gang's pod.

One GB200 rack (18 trays of 4 GPUs) keeping 2 spares, lent. The gang ``g`` (two 2-GPU pods, priority 100) runs
on r1-t00, which is then cordoned; one of its pods is gone and its replacement asks. Trays t01-t15 are full of
priority-1000 pods. The spares are borrowed: t16 by A (2 GPUs, priority 5) and B (1 GPU, priority 10), one GPU
free; t17 by C (4 GPUs, priority 1).
"""

from __future__ import annotations

import time
from typing import Any

from kilter.gangs import GangBook, identify
from kilter.gangs.records import PLAN_ANNOTATION, PlanRecord, encode
from kilter.model.annotations import SPARES_FOR_PREEMPTIBLE
from kilter.state.events import DELETED, Event
from kilter.state.store import ClusterStore
from tests.extenders.conftest import pod_json
from tests.extenders.test_gang_repair_http import JOB_INDEX, KEYS
from tests.extenders.test_spares_http import flavor
from tests.topology.builders import CLIQUE, node_dict

GANG = {"kilter.dev/gang": "g", "kilter.dev/gang-size": "2"}


def prio(pod: dict[str, Any], value: int) -> dict[str, Any]:
    pod["spec"]["priority"] = value
    return pod


def member(rank: int, *, node: str) -> dict[str, Any]:
    pod = prio(pod_json(f"g-{rank}" + ("" if node else "-r"), 2, labels=GANG, annotations={JOB_INDEX: str(rank)}), 100)
    if node:
        pod["spec"]["nodeName"] = node
        record = PlanRecord("ml/gang/g", time.time() - 3600, (("r1-t00", 2), ("r1-t00", 2)))
        pod["metadata"]["annotations"][PLAN_ANNOTATION] = encode(record, keys=KEYS, uid=pod["metadata"]["uid"])
    return pod


def objects() -> list[dict[str, Any]]:
    nodes = [node_dict(f"r1-t{t:02d}", labels={CLIQUE: "r1"}, cordoned=t == 0) for t in range(18)]
    busy = [prio(pod_json(f"serve-{t}", 4, node=f"r1-t{t:02d}"), 1000) for t in range(1, 16)]
    borrowers = [
        prio(pod_json("a", 2, node="r1-t16"), 5),
        prio(pod_json("b", 1, node="r1-t16"), 10),
        prio(pod_json("c", 4, node="r1-t17"), 1),
    ]
    lending = flavor("2")
    lending["metadata"]["annotations"][SPARES_FOR_PREEMPTIBLE] = "true"
    return [*nodes, *busy, *borrowers, member(0, node="r1-t00"), member(1, node=""), lending]


def test_the_tray_taking_back_least_and_on_it_the_lowest_borrowers_until_enough() -> None:
    store = ClusterStore()
    book = GangBook(store, keys=KEYS)
    store.replace(objects())
    asker = store.pod_named("ml", "g-1-r")
    assert asker is not None
    gang = identify(asker, store)
    assert gang is not None
    plan = book.plan_for(gang, asker, 2)
    assert plan is not None and plan.origin == "repair" and plan.feasible, plan and plan.plan.reason
    # t16 needs 1 GPU back (1 free), t17 needs 2: t16. There A (priority 5, 2 GPUs) alone frees enough; B stays.
    assert [r.now for r in plan.repaired] == ["r1-t16"] and plan.repaired[0].step == "reclaim"
    assert [(name, node) for _, name, _, node in plan.victims] == [("a", "r1-t16")]
    # Nothing is reserved on t16 until A is gone; then at once, from the store's watcher.
    assert not store.reservation("ml/gang/g")
    store.apply([Event(DELETED, pod_json("a", 2, node="r1-t16"))])
    assert [h.node for h in store.reservation("ml/gang/g")] == ["r1-t16"]
