"""The decision log keeps a bounded number of records and nodes, newest pods first, and renders them on request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kilter.extenders.explain import MAX_ENTRIES, MAX_UNKNOWN_NAMES, DecisionLog, Record
from tests.extenders.conftest import (
    Served,
    names_args,
    pod_json,
    serve_snapshot,
)


def record(i: int) -> Record:
    return Record(
        "prioritize",
        0.0,
        f"decision {i}",
        ["a", "b"],
        np.array([1, 0], dtype=np.int32),
        scores=np.array([3, 7], dtype=np.int8),
    )


def test_each_pod_keeps_its_last_decisions_and_the_log_forgets_the_least_recent_pods() -> None:
    log = DecisionLog(records=6, per_pod=2)
    for i in range(3):
        log.add("ns", "p0", record(i))
    assert [r["summary"] for r in log.explain("ns", "p0") or []] == ["decision 1", "decision 2"]
    for pod in ("p1", "p2"):
        log.add("ns", pod, record(0))
        log.add("ns", pod, record(1))
    log.add("ns", "p0", record(3))  # p0 is now the most recent; p1 is the least
    log.add("ns", "p3", record(0))
    assert log.explain("ns", "p1") is None
    assert log.explain("ns", "p0") is not None and log.explain("ns", "p3") is not None


def test_a_record_over_fleet_indices_names_the_nodes_in_request_order() -> None:
    rendered = record(0).render()
    assert rendered["nodes"] == [{"node": "b", "score": 3}, {"node": "a", "score": 7}]


def test_a_record_keeps_a_bounded_number_of_unknown_names_and_says_how_many_it_left_out() -> None:
    sent = ["a", *(f"ghost-{i}" for i in range(MAX_UNKNOWN_NAMES + 50)), "b"]
    index = np.array([0, *([-1] * (MAX_UNKNOWN_NAMES + 50)), 1], dtype=np.int32)
    scores = np.arange(len(sent), dtype=np.int64).astype(np.int8)
    kept = Record("prioritize", 0.0, "s", ["a", "b"], index, scores=scores, sent=sent).bounded()
    assert kept.size == MAX_UNKNOWN_NAMES + 2 and len(kept.unknown) == MAX_UNKNOWN_NAMES
    rendered = kept.render()
    names = [n["node"] for n in rendered["nodes"]]
    assert names == ["a", *(f"ghost-{i}" for i in range(MAX_UNKNOWN_NAMES)), "b"]
    assert rendered["nodes"][-1]["score"] == scores[-1]  # the known node after the cut keeps its own score
    assert rendered["note"] == "50 more nodes kilter does not know were not kept (only the first 100 are)"


def test_a_record_keeps_at_most_max_entries_nodes_even_when_all_are_known() -> None:
    index = np.zeros(MAX_ENTRIES + 7, dtype=np.int32)  # one known node, named again and again
    kept = Record("prioritize", 0.0, "s", ["a"], index, scores=np.zeros(len(index), dtype=np.int8)).bounded()
    assert kept.size == MAX_ENTRIES
    assert kept.render()["note"] == f"7 more nodes past the first {MAX_ENTRIES:,} were not kept"


def test_the_log_forgets_the_least_recent_pods_once_it_holds_more_nodes_than_its_budget() -> None:
    log = DecisionLog(records=100, per_pod=4, entries=5)
    for pod in ("p0", "p1", "p2"):
        log.add("ns", pod, record(0))  # two nodes each
    assert log.size == 4 and log.explain("ns", "p0") is None  # 6 > 5: p0 went
    assert log.explain("ns", "p1") is not None and log.explain("ns", "p2") is not None


@pytest.fixture
def served_once(tmp_path: Path) -> Iterator[Served]:
    with serve_snapshot(tmp_path) as served:
        yield served


def test_forty_filters_naming_many_unknown_nodes_keep_the_log_bounded_and_explain_says_so(served_once: Served) -> None:
    ghosts = [f"ghost-{i:06d}" for i in range(20_000)]
    for p in range(40):
        status, result = served_once.post("filter", names_args(pod_json(f"p{p}", 4), ["r1-t00", *ghosts, "r1-t01"]))
        assert status == 200 and result["NodeNames"] == ["r1-t00", "r1-t01"]
    log = served_once.app.extender.log
    assert log.names_kept == 40 * MAX_UNKNOWN_NAMES  # not 40 x 20,000
    assert log.size == 40 * (MAX_UNKNOWN_NAMES + 2)
    status, data, _ = served_once.call("GET", "/debug/explain?namespace=ml&pod=p39")
    assert status == 200
    [decision] = json.loads(data)["decisions"]
    nodes = [n["node"] for n in decision["nodes"]]
    assert nodes == ["r1-t00", *ghosts[:MAX_UNKNOWN_NAMES], "r1-t01"]
    assert decision["nodes"][1]["verdict"] == "unresolvable"
    assert decision["note"] == "19,900 more nodes kilter does not know were not kept (only the first 100 are)"
