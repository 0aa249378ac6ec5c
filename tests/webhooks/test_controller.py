"""The AdmissionCheck controller writes through the API with server-side apply, once per decision,
and hands Ready plans to the extender's gang book."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from kilter.gangs import GangBook, GangId, PlanKeys, records
from kilter.kube.api import ApiServer
from kilter.kube.events import EventRecorder
from kilter.model import codec
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from kilter.webhooks.admissioncheck import (
    CHECKS,
    CONTROLLER_NAME,
    WORKLOADS,
    CheckDecision,
    Controller,
    check_status_path,
    workload_status_path,
)
from tests.extenders.conftest import pod_json
from tests.fakeapi import Answer, Call, FakeApi, running, status
from tests.webhooks.test_admissioncheck import CHECK, objects, workload

KEYS = PlanKeys([b"k" * 64], source="test keys")


class StatusWriter:
    """Accepts server-side applies (echoing the object), failing the next ``fail_next`` with a 500."""

    def __init__(self) -> None:
        self.fail_next = 0

    def __call__(self, call: Call) -> Answer:
        if self.fail_next:
            self.fail_next -= 1
            return status(500, "InternalError", "etcd timed out")
        return 200, call.body


@pytest.fixture
def writer() -> StatusWriter:
    return StatusWriter()


@pytest.fixture
def api(writer: StatusWriter) -> Iterator[FakeApi]:
    with running(writer) as server:
        yield server


def patches(api: FakeApi) -> list[tuple[str, dict[str, list[str]], str, Any]]:
    assert all(c.method == "PATCH" for c in api.calls)
    return [(c.path, c.query, c.content_type, c.body) for c in api.calls]


def controller(api: FakeApi, on_ready: Any = None) -> tuple[Controller, ClusterStore]:
    store = ClusterStore()
    store.replace(objects())
    connection = ApiServer("http", "127.0.0.1", api.port)
    return Controller(store, connection, on_ready=on_ready), store


def test_each_decision_is_applied_once_with_only_kilters_entry(api: FakeApi) -> None:
    ctl, _ = controller(api)
    asyncio.run(ctl.run_once())
    paths = [p for p, _, _, _ in patches(api)]
    assert paths[0] == f"/apis/kueue.x-k8s.io/v1beta2/admissionchecks/{CHECK}/status"
    assert sorted(paths[1:]) == sorted(
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/{name}/status"
        for name in ("fits", "spans", "later", "never")
    )
    for _, query, content_type, body in patches(api):
        assert query == {"fieldManager": [CONTROLLER_NAME], "force": ["true"]}
        assert content_type == "application/apply-patch+yaml"
        assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    fits = next(b for p, _, _, b in patches(api) if p.endswith("/fits/status"))
    assert [e["name"] for e in fits["status"]["admissionChecks"]] == [CHECK]
    assert fits["status"]["admissionChecks"][0]["state"] == "Ready"
    api.calls.clear()
    asyncio.run(ctl.run_once())  # nothing changed: only the check's Active status again
    assert [p for p, _, _, _ in patches(api)] == [f"/apis/kueue.x-k8s.io/v1beta2/admissionchecks/{CHECK}/status"]


def test_a_decision_made_again_later_with_the_same_plan_is_not_written_again(api: FakeApi) -> None:
    store = ClusterStore()
    store.replace(objects())
    clock = [1_780_000_000.0]
    ctl = Controller(store, ApiServer("http", "127.0.0.1", api.port), wall=lambda: clock[0])
    asyncio.run(ctl.run_once())
    spans = next(b for p, _, _, b in patches(api) if p.endswith("/spans/status"))
    update = spans["status"]["admissionChecks"][0]["podSetUpdates"][0]
    assert json.loads(update["annotations"]["kilter.dev/plan"])["at"] == "2026-05-28T20:26:40Z"
    api.calls.clear()
    clock[0] += 60  # the next round's records carry a later time, and the same slots
    asyncio.run(ctl.run_once())
    assert [p for p, _, _, _ in patches(api)] == [f"/apis/kueue.x-k8s.io/v1beta2/admissionchecks/{CHECK}/status"]


def test_a_failed_write_is_tried_again_next_round(api: FakeApi, writer: StatusWriter) -> None:
    ctl, _ = controller(api)
    writer.fail_next = 2  # the Active status and the first workload
    asyncio.run(ctl.run_once())
    assert ctl.errors == 2
    api.calls.clear()
    asyncio.run(ctl.run_once())
    assert len([p for p, _, _, _ in patches(api) if "/workloads/" in p]) == 1


def test_ready_plans_are_adopted_by_the_gang_book(api: FakeApi) -> None:
    adopted: list[CheckDecision] = []
    ctl, store = controller(api, on_ready=adopted.append)
    asyncio.run(ctl.run_once())
    assert {d.workload for d in adopted} == {"fits", "spans"}
    book = GangBook(store)
    fits = next(d for d in adopted if d.workload == "fits")
    assert fits.plan is not None
    fleet = store.fleet()
    before = int(fleet.bitmap.domain_free_gpus.sum())
    plan = book.adopt(GangId("ml/workload/fits", CONTROLLER_NAME, 4), fits.plan)
    assert plan is not None and int(fleet.bitmap.domain_free_gpus.sum()) == before - 16
    assert book.adopt(GangId("ml/workload/fits", CONTROLLER_NAME, 4), fits.plan) is None  # already planned


def test_only_the_leader_writes(api: FakeApi) -> None:
    store = ClusterStore()
    store.replace(objects())
    leading = [False]
    ctl = Controller(store, ApiServer("http", "127.0.0.1", api.port), interval_s=0.01, is_writer=lambda: leading[0])

    async def rounds() -> None:
        task = asyncio.create_task(ctl.run())
        await asyncio.sleep(0.1)
        assert api.calls == []  # a follower decides nothing and writes nothing
        leading[0] = True
        for _ in range(200):
            if len(api.calls) >= 5:
                break
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(rounds())
    assert len(patches(api)) >= 5


def test_each_written_decision_is_an_event_on_its_workload(api: FakeApi) -> None:
    store = ClusterStore()
    store.replace(objects())
    connection = ApiServer("http", "127.0.0.1", api.port)
    events = EventRecorder(connection)
    ctl = Controller(store, connection, events=events)
    asyncio.run(ctl.run_once())
    events.close()
    posted = {c.body["involvedObject"]["name"]: c.body for c in api.calls if c.path.endswith("/events")}
    assert posted["fits"]["reason"] == "KilterGangPlanned" and posted["fits"]["type"] == "Normal"
    assert posted["never"]["reason"] == "KilterCheckRejected" and posted["never"]["type"] == "Warning"
    assert posted["later"]["reason"] == "KilterCheckRetry"
    assert all(b["involvedObject"]["kind"] == "Workload" for b in posted.values())


def spans_record(api: FakeApi) -> str:
    """The plan record the controller put in the podSetUpdates of Workload ml/spans (its pods span two racks)."""
    spans = next(b for p, _, _, b in patches(api) if p.endswith("/spans/status"))
    value = spans["status"]["admissionChecks"][0]["podSetUpdates"][0]["annotations"][records.PLAN_ANNOTATION]
    assert isinstance(value, str)
    return value


def test_the_plan_records_of_pod_set_updates_are_signed_for_the_workloads_uid(api: FakeApi) -> None:
    store = ClusterStore()
    store.replace(objects())
    asyncio.run(Controller(store, ApiServer("http", "127.0.0.1", api.port), keys=KEYS).run_once())
    record = records.decode(spans_record(api), where="test")
    assert record is not None and record.gang == "ml/workload/spans"
    assert records.verifies(record, KEYS, ["uid-spans"])
    assert not records.verifies(record, KEYS, ["uid-fits"])  # copied onto another Workload's pods: not kilter's
    assert not records.verifies(record, PlanKeys([b"o" * 64], source="another kilter"), ["uid-spans"])


def test_a_record_kueue_copies_onto_a_pod_is_taken_up_by_the_gang_book_after_a_restart(api: FakeApi) -> None:
    # What GangBook._from_record reads for a gang whose record sits on its pods: the newest one a key verifies
    # for the pod or for the Workload the record names.
    store = ClusterStore()
    store.replace(objects())
    asyncio.run(Controller(store, ApiServer("http", "127.0.0.1", api.port), keys=KEYS).run_once())
    value = spans_record(api)
    pod = codec.convert(pod_json("spans-0", annotations={records.PLAN_ANNOTATION: value}), Pod)
    uids = {"ml/workload/spans": "uid-spans"}
    found = records.newest([pod], keys=KEYS, owner_uid=lambda gang: uids.get(gang, ""))
    assert found is not None and found.gang == "ml/workload/spans"
    assert records.newest([pod], keys=KEYS, owner_uid=lambda gang: "uid-spans-made-again") is None


def test_without_keys_the_controller_writes_records_no_gang_book_takes_up(api: FakeApi) -> None:
    ctl, _ = controller(api)
    asyncio.run(ctl.run_once())
    record = records.decode(spans_record(api), where="test")
    assert record is not None and record.sig == ""


def test_the_status_paths_are_built_with_each_name_checked_and_escaped() -> None:
    assert workload_status_path("ml", "fits") == WORKLOADS.format(namespace="ml", name="fits")
    assert check_status_path(CHECK) == CHECKS.format(name=CHECK)


def test_a_workload_whose_name_no_api_server_accepts_is_skipped_and_the_round_goes_on(api: FakeApi) -> None:
    store = ClusterStore()
    bad = workload("fits", 4)
    bad["metadata"]["name"] = "../../pods/victim"
    store.replace([*objects(), bad])
    ctl = Controller(store, ApiServer("http", "127.0.0.1", api.port))
    asyncio.run(ctl.run_once())
    paths = [p for p, _, _, _ in patches(api)]
    assert ctl.errors == 1
    assert all("victim" not in p for p in paths)
    assert WORKLOADS.format(namespace="ml", name="spans") in paths


def test_each_decision_written_is_published_to_the_decision_feed_and_nothing_when_unchanged(api: FakeApi) -> None:
    from kilter.gangs.decisions import Decision, DecisionFeed

    ctl, _ = controller(api)
    ctl.feed = feed = DecisionFeed()
    sub = feed.subscribe("ml")
    asyncio.run(ctl.run_once())
    seen = []
    while (item := sub.take()) is not None:
        assert isinstance(item, Decision)
        seen.append(item)
    written = {p.split("/")[-2]: b for p, _, _, b in patches(api) if "/workloads/" in p}
    assert sorted(d.name for d in seen) == sorted(written) == ["fits", "later", "never", "spans"]
    for d in seen:
        entry = written[d.name]["status"]["admissionChecks"][0]
        assert (d.source, d.verb, d.kind, d.namespace) == ("admission-check", CHECK, "workload", "ml")
        assert (d.outcome, d.message) == (entry["state"], entry["message"])
    asyncio.run(ctl.run_once())  # nothing new to write: nothing new to publish
    assert sub.take() is None
