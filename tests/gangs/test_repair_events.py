"""A repair plan tells what it replaced by what, as Events ``kubectl describe`` shows on the replacement pods."""

from __future__ import annotations

from kilter.gangs import GangBook, PlanRecorder, identify
from kilter.kube.api import ApiServer
from kilter.kube.events import EventRecorder
from kilter.model import codec
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from tests.extenders.test_gang_repair_http import KEYS, RANK_NODE, after_failure, member
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
