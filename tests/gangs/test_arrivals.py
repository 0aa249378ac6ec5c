"""A gang book learns each bound pod of a kilter-planned gang as the store takes it in, so that the repair decision
after a failure reads none of the survivors again; other pods are not read."""

from __future__ import annotations

import pytest

from kilter.gangs import GangBook, pod_facts, ranks, records
from kilter.model.core_v1 import Pod
from kilter.state.events import ADDED, Event
from kilter.state.store import ClusterStore
from tests.extenders.conftest import cluster_objects, pod_json

INDEX = "batch.kubernetes.io/job-completion-index"


def test_bound_pods_with_a_record_are_read_as_they_arrive(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    real = ranks.read_index

    def counted(pod: Pod) -> ranks.PodIndex | str | None:
        read.append(pod.metadata.name)
        return real(pod)

    monkeypatch.setattr(ranks, "read_index", counted)
    pod_facts.forget()
    store = ClusterStore()
    store.replace(cluster_objects())
    GangBook(store)
    planned = pod_json("w0", 4, node="r1-t00", annotations={INDEX: "0", records.PLAN_ANNOTATION: "{}"})
    pending = pod_json("w1", 4, annotations={INDEX: "1", records.PLAN_ANNOTATION: "{}"})
    other = pod_json("solo", 4, node="r1-t01", annotations={INDEX: "2"})
    store.apply([Event(ADDED, planned), Event(ADDED, pending), Event(ADDED, other)])
    assert read == ["w0"]  # bound and planned by kilter: read on arrival; the others are not
    held = store.pod_named("ml", "w0")
    assert held is not None
    found = pod_facts.index_of(held)
    assert isinstance(found, ranks.PodIndex) and found.index == 0 and read == ["w0"]  # answered from the memo
    assert pod_facts.record_time(held, records.record_time) == ("{}", None)
