"""The AdmissionCheck's plan is in rank order: its podSetUpdates record lists a pod set's nodes rank 0 first, and the
gang book that takes the plan up holds each pod of the Workload to the node of its index."""

from __future__ import annotations

from kilter.gangs import GangBook, GangId, seats
from kilter.gangs.ranks import Place
from kilter.gangs.records import decode
from kilter.model import codec
from kilter.model.annotations import CONTROLLER_NAME
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from tests.extenders.conftest import pod_json
from tests.webhooks.test_admissioncheck import decisions, objects


def test_a_pod_sets_plan_record_lists_its_nodes_in_rank_order() -> None:
    spans = decisions()["spans"]  # 30 pods over two racks: no one domain to pin, so the record goes on the pods
    raw = spans.pod_set_updates[0]["annotations"]["kilter.dev/plan"]
    record = decode(raw, where="test")
    assert record is not None
    nodes = [node for node, _ in record.slots]
    assert spans.plan is not None and tuple(nodes) == spans.plan.pod_sets[0].nodes  # position i is rank i
    racks = [n.split("-")[0] for n in nodes]
    assert len(set(racks)) == 2 and racks == sorted(racks) and nodes == sorted(nodes)  # racks, then trays, in order


def test_the_workloads_pods_are_held_to_the_node_their_index_has_in_the_checks_plan() -> None:
    spans = decisions()["spans"]
    assert spans.plan is not None
    planned = spans.plan.pod_sets[0].nodes

    def pod(i: int) -> Pod:
        notes = {"kueue.x-k8s.io/workload": "spans", "batch.kubernetes.io/job-completion-index": str(i)}
        return codec.convert(
            pod_json(f"spans-{i}", 4, labels={"kueue.x-k8s.io/podset": "main"}, annotations=notes), Pod
        )

    store = ClusterStore()
    store.replace(objects())
    book = GangBook(store)
    adopted = book.adopt(GangId("ml/workload/spans", CONTROLLER_NAME, 30), spans.plan)  # as kilter serve's on_ready
    assert adopted is not None
    fleet = store.fleet()
    for i in (0, 9, 17, 29):
        found = seats.seat(adopted, pod(i), f"uid-spans-{i}", 4, store)
        assert found.place == Place("main", i) and [fleet.node_names[n] for n in found.nodes] == [planned[i]]
