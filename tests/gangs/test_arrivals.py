"""A gang book learns each bound pod of a kilter-planned gang as the store takes it in, so that the repair decision
after a failure reads none of the survivors again; other pods are not read."""

from __future__ import annotations

from typing import Any

import pytest

from kilter.gangs import GangBook, identify, pod_facts, ranks, records
from kilter.model.core_v1 import Pod
from kilter.state.events import ADDED, DELETED, MODIFIED, Event
from kilter.state.store import ClusterStore
from kilter.topology.spares import NO_GANG
from tests.extenders.conftest import cluster_objects, pod_json

INDEX = "batch.kubernetes.io/job-completion-index"


def test_bound_pods_with_a_record_are_read_as_they_arrive(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    real = ranks.read_index

    def counted(pod: Pod) -> ranks.RankLabel | str | None:
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
    assert isinstance(found, ranks.RankLabel) and found.index == 0 and read == ["w0"]  # answered from the memo
    assert pod_facts.record_time(held, records.record_time) == ("{}", None)


def ranks_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the pods whose rank is read from now on (``ranks.place_of`` counted; every memo forgotten)."""
    read: list[str] = []
    real = ranks.place_of

    def counted(pod: Pod, *args: Any, **kwargs: Any) -> ranks.Place | str | None:
        read.append(pod.metadata.name)
        return real(pod, *args, **kwargs)

    monkeypatch.setattr(ranks, "place_of", counted)
    pod_facts.forget()
    return read


def test_a_gang_the_book_laid_out_has_its_ranks_read_as_its_pods_arrive_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The book plans a 6-pod gang (laying it out), its pods arrive bound: each rank is read then, once; a
    replacement's repair decision later reads the rank of no survivor again, only the replacement's own."""
    read = ranks_read(monkeypatch)
    store = ClusterStore()
    store.replace(cluster_objects())
    book = GangBook(store)
    gang = {"kilter.dev/gang": "llm", "kilter.dev/gang-size": "6"}
    store.apply([Event(ADDED, pod_json(f"w{i}", 4, labels=gang, annotations={INDEX: str(i)})) for i in range(6)])
    first = store.pod_named("ml", "w0")
    assert first is not None
    gang_id = identify(first, store)
    assert gang_id is not None
    planned = book.plan_for(gang_id, first, 4)
    assert planned is not None and planned.plan.feasible
    assert book.arrivals.shapes["ml/gang/llm"] == (ranks.Shape("pods", 6, 4),)
    nodes = [slot.node for slot in planned.slots]
    book._drop(planned)
    read.clear()
    record = records.encode(records.PlanRecord("ml/gang/llm", 1.0, tuple((n, 4) for n in nodes)), uid="x")
    bound = [
        pod_json(f"w{i}", 4, labels=gang, node=nodes[i], annotations={INDEX: str(i), records.PLAN_ANNOTATION: record})
        for i in range(6)
    ]
    store.apply([Event(ADDED, b) for b in bound])
    assert sorted(read) == [f"w{i}" for i in range(6)]  # each rank read as its pod arrived bound
    store.apply([Event(DELETED, bound[2])])
    store.apply([Event(ADDED, pod_json("w2-again", 4, labels=gang, annotations={INDEX: "2"}))])
    read.clear()
    asker = store.pod_named("ml", "w2-again")
    assert asker is not None
    fixed = book.plan_for(gang_id, asker, 4)
    assert fixed is not None and fixed.origin == "repair" and fixed.plan.feasible
    survivors = {f"w{i}" for i in range(6) if i != 2}
    assert not survivors & set(read)  # the survivors' ranks came from their arrival
    book._drop(fixed)
    pod_facts.forget(places_only=True)  # what a kilter that did not plan the gang knows (restarted)
    again = book.plan_for(gang_id, asker, 4)
    assert again is not None and again.origin == "repair" and survivors <= set(read)  # read at the decision


def test_pods_of_a_gang_never_laid_out_get_their_ranks_read_at_its_first_decision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read = ranks_read(monkeypatch)
    store = ClusterStore()
    store.replace(cluster_objects())
    GangBook(store)
    gang = {"kilter.dev/gang": "cold", "kilter.dev/gang-size": "2"}
    notes = {INDEX: "0", records.PLAN_ANNOTATION: "{}"}
    store.apply([Event(ADDED, pod_json("c0", 4, labels=gang, node="r1-t00", annotations=notes))])
    assert read == []  # which pod sets the gang has is not known before a decision lays it out


def test_the_priority_floor_of_a_domain_follows_its_gang_pods_and_below_counts_every_lower_pod() -> None:
    store = ClusterStore()
    store.replace(cluster_objects())
    book = GangBook(store)

    def prio(pod: dict[str, Any], value: int) -> dict[str, Any]:
        pod["spec"]["priority"] = value
        return pod

    gang = {"kilter.dev/gang": "g", "kilter.dev/gang-size": "2"}
    g0 = prio(pod_json("g0", 4, labels=gang, node="r1-t00"), 100)
    g1 = prio(pod_json("g1", 4, labels=gang, node="r1-t01"), 50)
    lone = prio(pod_json("lone", 2, node="r1-t02"), 10)
    store.apply([Event(ADDED, p) for p in (g0, g1, lone)])
    fleet = store.fleet()
    r1, r2 = fleet.domain_ids.index("r1"), fleet.domain_ids.index("r2")
    floor = book.arrivals.floor(fleet)
    assert floor[r1] == 50 and floor[r2] == NO_GANG  # the lone pod is no gang: it sets no floor

    def borrowed(node: str, below: int) -> int:
        return sum(gpus for _, _, gpus in book.arrivals.borrowers(node, below, store))

    assert borrowed("r1-t02", 11) == 2 and borrowed("r1-t02", 10) == 0
    assert borrowed("r1-t00", 101) == 0  # a gang's pod is never taken back
    relabelled = {**g1, "metadata": {**g1["metadata"], "labels": {**gang, "note": "x"}}}
    store.apply([Event(MODIFIED, relabelled)])  # nothing a floor reads changed: the floors are kept
    assert book.arrivals.floor(store.fleet()) is floor
    moved = {**g1, "spec": {**g1["spec"], "nodeName": "r2-t00"}}
    store.apply([Event(MODIFIED, moved)])  # the pod (as the feed shows it) is now in r2: both floors change
    floor = book.arrivals.floor(store.fleet())
    assert floor[r1] == 100 and floor[r2] == 50
    raised = {**moved, "spec": {**moved["spec"], "priority": 200}}
    store.apply([Event(MODIFIED, raised)])
    assert book.arrivals.floor(store.fleet())[r2] == 200
    store.apply([Event(DELETED, raised)])
    assert book.arrivals.floor(store.fleet())[r2] == NO_GANG
    store.apply([Event(DELETED, g0)])
    assert book.arrivals.floor(store.fleet())[r1] == NO_GANG
