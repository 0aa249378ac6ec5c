"""The decision log keeps a bounded number of records, newest pods first, and renders them on request."""

from __future__ import annotations

import numpy as np

from kilter.extenders.explain import DecisionLog, Record


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
