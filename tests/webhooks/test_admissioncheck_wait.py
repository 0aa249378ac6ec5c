"""The AdmissionCheck keeps a Workload that would only fit split for now Pending, quota kept, saying until when.

The scenario (``tests.gangs.wait_scenario``): the Workload's four 4-GPU pods
fit one rack when idle but two now; it declares 10 h, so it may wait 2 h from
the moment Kueue reserved its quota (``QuotaReserved`` turned True at
10:00:00; it was created at 09:59:00), until 12:00:00. While it waits the
entry stays ``Pending``, so Kueue keeps the quota reserved (a ``Retry`` would
evict it and give the quota back) and the gang holds no nodes; the controller
judges it again each round and at the moment its budget runs out.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kilter.gangs.records import PLAN_ANNOTATION
from kilter.gangs.waits import SplitWaits, Waits
from kilter.kube.api import ApiServer
from kilter.kube.events import EventRecorder
from kilter.quota.policy import parse_time
from kilter.state.cluster import from_objects
from kilter.state.store import MODIFIED, ClusterStore, Event
from kilter.topology.split_wait import SplitWait
from kilter.webhooks.admissioncheck import Controller, decide
from tests.clock import Clock
from tests.fakeapi import FakeApi, running
from tests.gangs.wait_scenario import BUDGET_S, FREE, fleet_objects, stamp
from tests.webhooks.test_admissioncheck import CHECK, admission_check, workload

RESERVED = parse_time("2026-12-01T10:00:00Z", path="test")  # QuotaReserved's lastTransitionTime in ``workload``
MESSAGE = "waiting until 2026-12-01T12:00:00Z for room in 1 domain; 2 available now"  # 10:00 + 2 h
WAITING = {"name": CHECK, "state": "Pending", "lastTransitionTime": "2026-12-01T10:00:00Z", "message": MESSAGE}


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


def test_a_workload_that_fits_only_split_stays_pending_saying_until_when_and_holds_no_nodes() -> None:
    d = decided(objects(), RESERVED + 630)
    assert (d.state, d.message, d.requeue_after_seconds, d.pod_set_updates) == ("Pending", MESSAGE, None, [])
    assert d.plan is None  # nothing for the gang book to adopt: no nodes held
    assert d.until_s == RESERVED + BUDGET_S
    entry = d.entry("2026-12-01T10:10:30Z")
    # The state did not change, so neither does its transition time; no requeueAfterSeconds, no podSetUpdates.
    assert entry == WAITING


def test_the_budget_counts_from_the_quota_reservation_not_from_the_creation() -> None:
    objs = objects()
    objs[-1]["metadata"]["creationTimestamp"] = "2026-11-30T09:00:00Z"  # a day before its quota was reserved
    d = decided(objs, RESERVED + 630)
    assert (d.state, d.message) == ("Pending", MESSAGE)  # counted from creation it would have been Ready long ago


@pytest.mark.parametrize(
    ("after_s", "state"),
    [
        pytest.param(BUDGET_S - 1, "Pending", id="1 s before 12:00: still waits"),
        pytest.param(BUDGET_S, "Ready", id="at 12:00 (10:00 + 2 h): the budget is spent"),
        pytest.param(BUDGET_S + 1, "Ready", id="after"),
    ],
)
def test_once_the_budget_is_spent_it_is_ready_split(after_s: float, state: str) -> None:
    d = decided(objects(), RESERVED + after_s)
    assert d.state == state
    if state == "Ready":
        assert d.plan is not None and sorted(d.plan.pod_sets[0].nodes) == FREE
        assert [u["name"] for u in d.pod_set_updates] == ["main"]  # its plan record, for the pods to come


def test_the_workloads_own_annotations_turn_it_off_or_refuse_it() -> None:
    assert decided(objects(**{"kilter.dev/split-wait": "0"}), RESERVED + 630).state == "Ready"
    d = decided(objects(**{"kilter.dev/split-wait-max": "never"}), RESERVED + 630)
    assert d.state == "Rejected" and "'never' is not a duration" in d.message


def test_kueues_max_exec_time_on_the_workload_is_its_runtime() -> None:
    wl = workload("wait", 4)
    wl["spec"]["maximumExecutionTimeSeconds"] = 18_000  # 5 h: a 1 h budget from 10:00
    objs = [*fleet_objects(), admission_check(CHECK, "kilter.dev/topology"), wl]
    assert decided(objs, RESERVED + 630).message == MESSAGE.replace("T12:", "T11:")


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with running(lambda call: (200, call.body)) as server:
        yield server


def written(api: FakeApi) -> list[dict[str, Any]]:
    entries = [c.body["status"]["admissionChecks"][0] for c in api.calls if c.path.endswith("/workloads/wait/status")]
    api.calls.clear()
    return entries


def controller(api: FakeApi, store: ClusterStore, clock: Clock) -> tuple[Controller, SplitWaits]:
    waits = SplitWaits(store, wall=clock)
    return Controller(store, ApiServer("http", "127.0.0.1", api.port), wall=clock, waits=waits), waits


def shown(message: str) -> Event:
    """The Workload as the API server has it once kilter's Pending message is applied."""
    wl = waiting_workload()
    wl["status"]["admissionChecks"][0]["message"] = message
    return Event(MODIFIED, wl)


def test_the_controller_writes_the_wait_once_then_ready_with_updates_at_the_budgets_moment(api: FakeApi) -> None:
    store = ClusterStore()
    store.replace(objects())
    clock = Clock(RESERVED + 630)
    ctl, waits = controller(api, store, clock)
    asyncio.run(ctl.run_once())
    [entry] = written(api)
    assert entry == WAITING
    assert waits.waiting() == 1 and store.reservation("ml/workload/wait") == ()
    assert ctl.next_round_s() == ctl.interval_s  # 1 h 49 min 30 s to go: the usual round
    store.apply([shown(MESSAGE)])  # the entry as written; Kueue keeps the quota (QuotaReserved stays True)
    clock.now += 600
    asyncio.run(ctl.run_once())
    assert written(api) == []  # the same sentence: not written again
    again, _ = controller(api, store, clock)  # a restarted kilter reads the message off the entry
    asyncio.run(again.run_once())
    assert written(api) == []
    clock.now = RESERVED + BUDGET_S - 4
    asyncio.run(ctl.run_once())
    assert written(api) == [] and ctl.next_round_s() == 4  # the next round comes when the budget runs out ...
    clock.now += 4
    asyncio.run(ctl.run_once())  # ... with no change to the Workload
    [ready] = written(api)
    assert ready["state"] == "Ready" and ready["message"].startswith("placed: 4 pods, 16 GPUs in 2 scale-up domains")
    assert ready["lastTransitionTime"] == stamp(RESERVED + BUDGET_S)
    assert PLAN_ANNOTATION in ready["podSetUpdates"][0]["annotations"]
    assert waits.waiting() == 0 and ctl.next_round_s() == ctl.interval_s


def test_room_that_frees_up_ends_the_wait_at_the_next_round(api: FakeApi) -> None:
    store = ClusterStore()
    store.replace(objects())
    clock = Clock(RESERVED + 630)
    ctl, _ = controller(api, store, clock)
    asyncio.run(ctl.run_once())
    assert [e["state"] for e in written(api)] == ["Pending"]
    # Two jobs on rack r1 finish: its four free trays hold the whole gang. The Workload itself does not change.
    store.replace([o for o in objects() if o["metadata"]["name"] not in ("busy-r1-t02", "busy-r1-t03")])
    clock.now += 10
    asyncio.run(ctl.run_once())
    [ready] = written(api)
    assert ready["state"] == "Ready" and "in 1 scale-up domain" in ready["message"]
    assert ready["podSetUpdates"][0]["nodeSelector"]  # pinned to the one rack


def test_a_new_reservation_restarts_the_clock_and_its_message_is_written(api: FakeApi) -> None:
    store = ClusterStore()
    store.replace(objects())
    clock = Clock(RESERVED + 630)
    ctl, _ = controller(api, store, clock)
    asyncio.run(ctl.run_once())
    assert [e["message"] for e in written(api)] == [MESSAGE]
    # Preempted at 10:30 and its quota reserved again at 11:00: Kueue reset the entry to Pending when it evicted.
    later = copy.deepcopy(waiting_workload())
    later["status"]["conditions"][0]["lastTransitionTime"] = "2026-12-01T11:00:00Z"
    later["status"]["admissionChecks"][0].update(
        lastTransitionTime="2026-12-01T10:30:00Z", message="Reset to Pending after eviction. Previously: Pending"
    )
    store.apply([Event(MODIFIED, later)])
    clock.now = RESERVED + 3600 + 60
    asyncio.run(ctl.run_once())
    [entry] = written(api)
    assert entry["message"] == "waiting until 2026-12-01T13:00:00Z for room in 1 domain; 2 available now"
    assert entry["lastTransitionTime"] == "2026-12-01T10:30:00Z"


def test_the_running_controller_wakes_for_the_budgets_end_well_before_its_interval(api: FakeApi) -> None:
    store = ClusterStore()
    store.replace(objects())
    offset = RESERVED + BUDGET_S - 0.5 - time.time()  # a wall clock half a second before the budget runs out

    def wall() -> float:
        return time.time() + offset

    waits = SplitWaits(store, wall=wall)
    ctl = Controller(store, ApiServer("http", "127.0.0.1", api.port), interval_s=3600, wall=wall, waits=waits)

    async def until_ready() -> None:
        task = asyncio.create_task(ctl.run())
        try:
            while not any(
                c.body["status"]["admissionChecks"][0]["state"] == "Ready"
                for c in list(api.calls)
                if c.path.endswith("/workloads/wait/status")
            ):
                await asyncio.sleep(0.05)
        finally:
            task.cancel()

    asyncio.run(asyncio.wait_for(until_ready(), timeout=60))  # an hour's interval, yet Ready within the minute
    assert [e["state"] for e in written(api)] == ["Pending", "Ready"]


def test_the_wait_is_an_event_on_the_workload_once(api: FakeApi) -> None:
    store = ClusterStore()
    store.replace(objects())
    connection = ApiServer("http", "127.0.0.1", api.port)
    events = EventRecorder(connection)
    clock = Clock(RESERVED + 630)
    ctl = Controller(store, connection, wall=clock, events=events, waits=SplitWaits(store, wall=clock))
    asyncio.run(ctl.run_once())
    clock.now += 60
    asyncio.run(ctl.run_once())
    events.close()
    [event] = [c.body for c in api.calls if c.path.endswith("/events")]
    assert (event["reason"], event["type"], event["message"]) == ("KilterGangWaiting", "Normal", MESSAGE)


def queued_since(name: str, created: str) -> dict[str, Any]:
    """A Workload Kueue has not reserved quota for since ``created``: a job waiting in the queue."""
    wl = workload(name, 4, reserved=False, checks=[])
    wl["metadata"]["creationTimestamp"] = created
    return wl


def test_while_jobs_have_queued_all_along_its_expected_run_it_gives_its_quota_back_and_retries() -> None:
    # One Workload has waited since the day before: over the gang's whole expected run (10 h) a job queued, so
    # a split would take GPU-time from a queue that outlasts it. It waits for its one rack, not holding the
    # quota the queue needs meanwhile: Retry (Kueue evicts it, gives the quota back and tries again).
    objs = [*objects(), queued_since("queued", "2026-11-30T09:00:00Z")]
    d = decided(objs, RESERVED + 630)
    assert (d.state, d.requeue_after_seconds, d.pod_set_updates, d.plan) == ("Retry", 60, [], None)
    assert d.message == (
        "waiting while jobs queue behind it: a split would slow them (for room in 1 domain; 2 available now)"
    )


def test_a_queue_that_turns_over_leaves_the_wait_priced_by_the_gang_itself() -> None:
    # The other Workload has waited only since 09:00 today, under a fifth of the 10 h window: the queue does
    # not outlast the gang's run, the split costs it little, and the gang waits out its own budget, Pending.
    d = decided([*objects(), queued_since("queued", "2026-12-01T09:00:00Z")], RESERVED + 630)
    assert d.state == "Pending" and d.message.startswith("waiting until 2026-12-01T12:")
