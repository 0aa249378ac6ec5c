"""The backlog a server prices a split by, read off Workloads and PodGroups as the API server returns them."""

from __future__ import annotations

from typing import Any

import pytest

from kilter.gangs.queue_load import backlog_of, waiting_span
from kilter.model import codec
from kilter.model.kueue import Workload
from kilter.quota.policy import parse_time
from kilter.state.cluster import from_objects


def t(stamp: str) -> float:
    return parse_time(stamp, path="test")


def wl(name: str, created: str, *conditions: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "creationTimestamp": created},
        "spec": {"queueName": "main", "podSets": []},
        "status": {
            "conditions": [
                {"type": kind, "status": status, "reason": kind, "message": "", "lastTransitionTime": at}
                for kind, status, at in conditions
            ]
        },
    }


def podgroup(name: str, created: str, phase: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": created},
        "spec": {"minMember": 2, "queue": "default"},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("conditions", "span"),
    [
        pytest.param((), ("10:00", None), id="no reservation yet: still waiting"),
        pytest.param((("QuotaReserved", "True", "11:00"),), ("10:00", "11:00"), id="reserved at 11:00"),
        pytest.param((("QuotaReserved", "False", "11:00"),), ("10:00", None), id="reservation released: waits again"),
        pytest.param((("Finished", "True", "12:00"),), None, id="finished with no reservation on record: untold"),
        pytest.param((("QuotaReserved", "True", "not a time"),), None, id="a reservation time that does not read"),
    ],
)
def test_a_workload_waited_from_its_creation_to_its_quota_reservation(
    conditions: tuple[tuple[str, str, str], ...], span: tuple[str, str | None] | None
) -> None:
    stamped = tuple((k, s, f"2026-12-01T{at}:00Z" if ":" in at and len(at) == 5 else at) for k, s, at in conditions)
    workload = codec.convert(wl("a", "2026-12-01T10:00:00Z", *stamped), Workload)
    expected = None if span is None else tuple(None if x is None else t(f"2026-12-01T{x}:00Z") for x in span)
    assert waiting_span(workload) == expected


def test_the_backlog_counts_waiting_workloads_and_podgroups_over_the_window() -> None:
    objects = [
        wl("waited-1h", "2026-12-01T10:00:00Z", ("QuotaReserved", "True", "2026-12-01T11:00:00Z")),
        wl("still-waiting", "2026-12-01T11:00:00Z"),
        podgroup("pg-pending", "2026-12-01T11:30:00Z", "Pending"),
        podgroup("pg-running", "2026-12-01T09:00:00Z", "Running"),  # Volcano stamps no start: untold
        wl("no-creation", ""),
    ]
    backlog = backlog_of(from_objects(objects))
    now = t("2026-12-01T12:00:00Z")
    # Over 10:00-12:00: 1 h of "waited-1h", 1 h of "still-waiting", 30 min of "pg-pending": 2.5 job-hours / 2 h.
    assert backlog.mean(now, 7200.0) == pytest.approx(1.25)
    # The asker itself ("still-waiting") leaves its own hour out.
    assert backlog.mean_of_others(now, 7200.0, t("2026-12-01T11:00:00Z")) == pytest.approx(0.75)
