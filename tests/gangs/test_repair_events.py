"""A repair plan is recorded and told (Events ``kubectl describe`` shows, on the Workload or the replacement pods),
and each replacement keeps to the nodes its own pod admits."""

from __future__ import annotations

import time
from typing import Any

from kilter.gangs import GangBook, PlanRecorder, identify
from kilter.gangs.identity import KUEUE_WORKLOAD
from kilter.gangs.records import PLAN_ANNOTATION, PlanRecord, decode, encode, verifies
from kilter.kube.api import ApiServer
from kilter.kube.events import EventRecorder
from kilter.model import codec
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from tests.extenders.conftest import pod_json
from tests.extenders.test_gang_owner_trust import GPU_CONTAINER
from tests.extenders.test_gang_repair_http import JOB_INDEX, KEYS, RANK_NODE, after_failure, member, node_objects
from tests.fakeapi import Call, running
from tests.topology.builders import CLIQUE


def test_each_moved_rank_gets_a_repaired_event_on_its_replacement_pod() -> None:
    with running(lambda call: (201, call.body)) as api:
        server = ApiServer("http", "127.0.0.1", api.server_address[1])
        recorder = PlanRecorder(server, keys=KEYS, events=EventRecorder(server))
        store = ClusterStore()
        store.replace(after_failure([55, 20]))
        book = GangBook(store, keys=KEYS, on_planned=recorder.on_planned)
        asker = codec.convert(member(20, replacement=True), Pod)
        gang = identify(asker, store)
        assert gang is not None
        plan = book.plan_for(gang, asker, 4)
        assert plan is not None and plan.origin == "repair"
        recorder.close()
        events: list[Call] = [c for c in api.calls if c.path == "/api/v1/namespaces/ml/events"]
        chosen = {s.rank: s.node for s in plan.slots if s.rank in (20, 55)}
        said = {e.body["involvedObject"]["name"]: e.body for e in events}
        assert set(said) == {"train-20-r", "train-55-r"}
        for rank in (20, 55):
            event = said[f"train-{rank}-r"]
            assert event["reason"] == "Repaired" and event["type"] == "Normal"
            assert event["involvedObject"] == {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": "ml",
                "name": f"train-{rank}-r",
                "uid": f"uid-train-{rank}-r",
            }
            assert (
                f"replaced {RANK_NODE[rank]} by {chosen[rank]} in domain r4, rank {rank} of pod set pods"
                in (event["message"])
            )


def test_a_replacement_keeps_to_the_nodes_its_own_pod_admits() -> None:
    """Its pod set was pinned to a domain at admission (Kueue puts podSetUpdates on the job's template, so the
    replacement carries the pin): the repair goes there, not to the nearest domain the gang uses."""
    objects = after_failure([20, 55])
    pinned = next(o for o in objects if o["metadata"]["name"] == "train-20-r")
    pinned["spec"]["nodeSelector"] = {CLIQUE: "r5"}
    store = ClusterStore()
    store.replace(objects)
    book = GangBook(store, keys=KEYS)
    asker = codec.convert(member(55, replacement=True), Pod)  # unpinned: the pod set's shape is the asker's
    gang = identify(asker, store)
    assert gang is not None
    plan = book.plan_for(gang, asker, 4)
    assert plan is not None and plan.origin == "repair" and plan.feasible, plan and plan.plan.reason
    ranks = {s.rank: s.node for s in plan.slots if s.rank in (20, 55)}
    assert ranks[20].startswith("r5-") and ranks[55].startswith("r4-"), ranks
    moved = {r.place.rank: r for r in plan.repaired if r.place is not None}
    assert moved[20].domain == "r5" and moved[20].how.startswith("a new domain")


def test_a_kueue_workloads_repair_is_recorded_and_told_on_the_workload() -> None:
    """A Workload's gang: the rank's old node comes from the record on the Workload, the repair record goes back
    on it (signed for its UID), and the Repaired Event names the Workload."""
    uid = "uid-wl-train"
    record = PlanRecord("ml/workload/train", time.time() - 86400, tuple((n, 4) for n in RANK_NODE[:16]))
    wl = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "uid": uid,
            "annotations": {PLAN_ANNOTATION: encode(record, keys=KEYS, uid=uid)},
        },
        "spec": {
            "queueName": "q",
            "podSets": [{"name": "main", "count": 16, "template": {"spec": {"containers": [GPU_CONTAINER]}}}],
        },
    }

    def pod(rank: int, node: str = "") -> dict[str, Any]:
        name = f"train-{rank}" + ("" if node else "-r")
        notes = {KUEUE_WORKLOAD: "train", JOB_INDEX: str(rank)}
        return pod_json(name, 4, annotations=notes, node=node)

    failed = [3, 9]
    objects = [
        *node_objects({RANK_NODE[r] for r in failed}),
        wl,
        *(pod(r, RANK_NODE[r]) for r in range(16) if r not in failed),
        *(pod(r) for r in failed),
    ]
    with running(lambda call: (201, call.body) if call.method == "POST" else (200, call.body)) as api:
        server = ApiServer("http", "127.0.0.1", api.server_address[1])
        recorder = PlanRecorder(server, keys=KEYS, events=EventRecorder(server))
        store = ClusterStore()
        store.replace(objects)
        book = GangBook(store, keys=KEYS, on_planned=recorder.on_planned)
        asker = codec.convert(pod(9), Pod)
        gang = identify(asker, store)
        assert gang is not None and gang.key == "ml/workload/train"
        plan = book.plan_for(gang, asker, 4)
        assert plan is not None and plan.origin == "repair" and plan.feasible, plan and plan.plan.reason
        recorder.close()
        moved = {r.place.rank: r for r in plan.repaired if r.place is not None}
        assert {r: m.was for r, m in moved.items()} == {3: RANK_NODE[3], 9: RANK_NODE[9]}
        assert all(m.domain == "r1" for m in moved.values()), moved  # r1 has two idle trays: both stay home
        patches = [c for c in api.calls if c.method == "PATCH"]
        assert [c.path for c in patches] == ["/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/train"]
        written = decode(patches[0].body["metadata"]["annotations"][PLAN_ANNOTATION], where="test")
        assert written is not None and verifies(written, KEYS, [uid])
        assert [n for n, _ in written.slots][3] == moved[3].now and [n for n, _ in written.slots][9] == moved[9].now
        events = [c.body for c in api.calls if c.path == "/api/v1/namespaces/ml/events"]
        assert len(events) == 2 and all(
            e["involvedObject"]
            == {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "namespace": "ml",
                "name": "train",
                "uid": uid,
            }
            for e in events
        )
        assert {e["message"].split(" in domain")[0].split("replaced ")[1] for e in events} == {
            f"{RANK_NODE[r]} by {moved[r].now}" for r in failed
        }
