"""The AdmissionCheck answers Retry, with the wait's reason, for a Workload that would only fit split for now.

The scenario (``tests.gangs.wait_scenario``): the Workload's four 4-GPU pods
fit one rack when idle but two now; it declares 10 h, so it may wait 2 h from
its ``creationTimestamp`` (09:59:00). ``Retry`` releases its quota (Kueue
evicts it), so it holds nothing while it waits, and is asked again after
``requeueAfterSeconds``.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from typing import Any

import pytest

from kilter.gangs.waits import SplitWaits, Waits
from kilter.kube.api import ApiServer
from kilter.quota.policy import parse_time
from kilter.state.cluster import from_objects
from kilter.state.store import MODIFIED, ClusterStore, Event
from kilter.topology.split_wait import SplitWait
from kilter.webhooks.admissioncheck import RETRY_AFTER_S, Controller, decide
from tests.fakeapi import FakeApi, running
from tests.gangs.wait_scenario import BUDGET_S, FREE, Clock, fleet_objects, stamp
from tests.webhooks.test_admissioncheck import CHECK, admission_check, workload

CREATED = parse_time("2026-12-01T09:59:00Z", path="test")
REASON = "waiting up to 1h50m for room in 1 domain; 2 available now"  # 10 min 30 s of 2 h gone


def waiting_workload(**annotations: str) -> dict[str, Any]:
    wl = workload("wait", 4)
    wl["metadata"]["annotations"] = {"kilter.dev/expected-runtime": "10h", **annotations}
    return wl


def objects(**annotations: str) -> list[dict[str, Any]]:
    return [*fleet_objects(), admission_check(CHECK, "kilter.dev/topology"), waiting_workload(**annotations)]


def decided(objs: list[dict[str, Any]], now_s: float) -> Any:
    state = from_objects(objs)
    waits = Waits.of_state(state, SplitWait(), now_s=now_s)
    [decision] = decide(state, state.fleet(), state.idle_fleet(), now_s=now_s, waits=waits)
    return decision


def test_a_workload_that_fits_only_split_is_told_to_retry_with_why() -> None:
    d = decided(objects(), CREATED + 630)
    assert (d.state, d.message, d.requeue_after_seconds, d.pod_set_updates) == ("Retry", REASON, RETRY_AFTER_S, [])
    assert d.plan is None  # nothing for the gang book to adopt: it holds nothing


def test_the_requeue_is_never_later_than_the_end_of_the_budget() -> None:
    d = decided(objects(), CREATED + BUDGET_S - 20)
    assert d.state == "Retry" and d.requeue_after_seconds == 20


def test_once_the_budget_is_spent_it_is_ready_split() -> None:
    d = decided(objects(), CREATED + BUDGET_S + 1)
    assert d.state == "Ready" and d.plan is not None and sorted(d.plan.pod_sets[0].nodes) == FREE


def test_the_workloads_own_annotations_turn_it_off_or_refuse_it() -> None:
    assert decided(objects(**{"kilter.dev/split-wait": "0"}), CREATED + 630).state == "Ready"
    d = decided(objects(**{"kilter.dev/split-wait-max": "never"}), CREATED + 630)
    assert d.state == "Rejected" and "'never' is not a duration" in d.message


def test_kueues_max_exec_time_on_the_workload_is_its_runtime() -> None:
    wl = workload("wait", 4)
    wl["spec"]["maximumExecutionTimeSeconds"] = 18_000  # 5 h: a 1 h budget, 10 min 30 s of it gone
    objs = [*fleet_objects(), admission_check(CHECK, "kilter.dev/topology"), wl]
    assert decided(objs, CREATED + 630).message == "waiting up to 49m30s for room in 1 domain; 2 available now"


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with running(lambda call: (200, call.body)) as server:
        yield server


def written(api: FakeApi) -> list[dict[str, Any]]:
    return [c.body["status"]["admissionChecks"][0] for c in api.calls if c.path.endswith("/workloads/wait/status")]


def test_the_controller_writes_retry_again_after_kueue_resets_the_entry_then_ready(api: FakeApi) -> None:
    store = ClusterStore()
    store.replace(objects())
    clock = Clock(CREATED + 630)
    waits = SplitWaits(store, wall=clock)
    ctl = Controller(store, ApiServer("http", "127.0.0.1", api.port), wall=clock, waits=waits)
    asyncio.run(ctl.run_once())
    [entry] = written(api)
    assert (entry["state"], entry["message"], entry["requeueAfterSeconds"]) == ("Retry", REASON, RETRY_AFTER_S)
    assert waits.waiting() == 1
    api.calls.clear()
    asyncio.run(ctl.run_once())  # the state still shows the entry Pending as it was: nothing new to write
    assert written(api) == []
    # Kueue evicts the Workload and resets the entry to Pending (a new lastTransitionTime); the next round's answer
    # is the same sentence, and must be written again, or the Workload would stay Pending for ever.
    reset = copy.deepcopy(waiting_workload())
    reset["status"]["admissionChecks"][0]["lastTransitionTime"] = stamp(CREATED + 700)
    store.apply([Event(MODIFIED, reset)])
    asyncio.run(ctl.run_once())
    assert [e["state"] for e in written(api)] == ["Retry"]
    api.calls.clear()
    clock.now = CREATED + BUDGET_S + 1
    asyncio.run(ctl.run_once())
    [ready] = written(api)
    assert ready["state"] == "Ready" and ready["message"].startswith("placed: 4 pods, 16 GPUs in 2 scale-up domains")
    assert waits.waiting() == 0
