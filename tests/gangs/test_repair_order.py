"""Two gangs lose a node each in one domain with one free node left: the gang that comes first (higher pod
priority, then gang key) gets it, whichever gang's replacement reached kilter first."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kilter.gangs import GangBook, identify
from kilter.gangs.keys import PlanKeys
from kilter.gangs.records import PLAN_ANNOTATION, PlanRecord, encode
from kilter.gangs.repair_queue import repair_order
from kilter.model import codec
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from tests.extenders.conftest import pod_json
from tests.topology.builders import CLIQUE, TIER1, node_dict

KEYS = PlanKeys([b"0rd3r" * 8], source="test")
INDEX = "batch.kubernetes.io/job-completion-index"
FAILED = {"r1-t01", "r1-t03"}
HOMES = {"a": ("r1-t00", "r1-t01"), "b": ("r1-t02", "r1-t03")}  # rank 0, rank 1 (lost)


def objects(priority: dict[str, int]) -> list[dict[str, Any]]:
    nodes = [
        node_dict(f"{r}-t{t:02d}", labels={CLIQUE: r, TIER1: "leaf"}, cordoned=f"{r}-t{t:02d}" in FAILED)
        for r, trays in (("r1", 5), ("r2", 3))
        for t in range(trays)
    ]
    pods = []
    for gang, homes in HOMES.items():
        labels = {"kilter.dev/gang": gang, "kilter.dev/gang-size": "2"}
        record = PlanRecord(f"ml/gang/{gang}", time.time() - 86400, tuple((n, 4) for n in homes))
        survivor = pod_json(f"{gang}-0", 4, labels=labels, annotations={INDEX: "0"}, node=homes[0])
        survivor["metadata"]["annotations"][PLAN_ANNOTATION] = encode(
            record, keys=KEYS, uid=survivor["metadata"]["uid"]
        )
        replacement = pod_json(f"{gang}-1-r", 4, labels=labels, annotations={INDEX: "1"})
        if gang in priority:
            replacement["spec"]["priority"] = priority[gang]
        pods += [survivor, replacement]
    return [*nodes, *pods]


def repaired(first: str, priority: dict[str, int]) -> dict[str, str]:
    """Where each gang's lost rank goes when ``first``'s replacement asks first, then the other's."""
    store = ClusterStore()
    book = GangBook(store, keys=KEYS)
    store.replace(objects(priority))
    out = {}
    for gang in (first, "b" if first == "a" else "a"):
        asker = codec.convert(next(o for o in objects(priority) if o["metadata"]["name"] == f"{gang}-1-r"), Pod)
        found = identify(asker, store)
        assert found is not None
        plan = book.plan_for(found, asker, 4)
        assert plan is not None and plan.origin == "repair" and plan.feasible, plan and plan.plan.reason
        out[gang] = next(s.node for s in plan.slots if s.rank == 1)
    return out


@pytest.mark.parametrize("first", ["a", "b"])
def test_the_gang_first_by_key_gets_the_free_node_whoever_asks_first(first: str) -> None:
    got = repaired(first, {})
    assert got["a"] == "r1-t04" and got["b"].startswith("r2-"), got


@pytest.mark.parametrize("first", ["a", "b"])
def test_a_higher_priority_comes_before_the_key(first: str) -> None:
    got = repaired(first, {"b": 1000})
    assert got["b"] == "r1-t04" and got["a"].startswith("r2-"), got


def test_repair_order_is_priority_then_key() -> None:
    def waiting(priority: int | None) -> list[Pod]:
        spec: dict[str, Any] = {} if priority is None else {"priority": priority}
        return [codec.convert({"metadata": {"name": "p"}, "spec": spec}, Pod)]

    assert repair_order("ml/gang/a", waiting(None)) < repair_order("ml/gang/b", waiting(0))
    assert repair_order("ml/gang/b", waiting(5)) < repair_order("ml/gang/a", waiting(None))
    assert repair_order("ml/gang/b", waiting(-5)) > repair_order("ml/gang/a", waiting(None))


def test_a_book_made_after_the_pods_arrived_knows_who_waits() -> None:
    store = ClusterStore()
    store.replace(objects({}))
    book = GangBook(store, keys=KEYS)
    assert sorted(book.arrivals.waiting) == ["ml/gang/a", "ml/gang/b"]
    assert [sorted(p.metadata.name for p in pods.values()) for _, pods in sorted(book.arrivals.waiting.items())] == [
        ["a-1-r"],
        ["b-1-r"],
    ]
    bound = next(o for o in objects({}) if o["metadata"]["name"] == "a-1-r")
    bound["spec"]["nodeName"] = "r1-t04"
    store.replace([o if o["metadata"]["name"] != "a-1-r" else bound for o in objects({})])
    assert sorted(book.arrivals.waiting) == ["ml/gang/b"]  # bound now: it waits no more
