"""Events reach the API as core/v1 Events, once per repeat window, only from the writer, never raising."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kilter.kube.api import ApiServer
from kilter.kube.events import EventRecorder, Involved
from tests.fakeapi import Answer, Call, FakeApi, running, status

WORKLOAD = Involved("kueue.x-k8s.io/v1beta2", "Workload", "ml", "job-a", uid="u-1")


class Api:
    def __init__(self) -> None:
        self.fail = False

    def __call__(self, call: Call) -> Answer:
        if self.fail:
            return status(403, "Forbidden", 'events is forbidden: User "x" cannot create resource "events"')
        return 201, call.body


@pytest.fixture
def answers() -> Api:
    return Api()


@pytest.fixture
def api(answers: Api) -> Iterator[FakeApi]:
    with running(answers) as server:
        yield server


def recorder(api: FakeApi, **options: object) -> EventRecorder:
    return EventRecorder(ApiServer("http", "127.0.0.1", api.port), **options)  # type: ignore[arg-type]


def test_an_event_is_a_core_v1_event_on_the_object(api: FakeApi) -> None:
    events = recorder(api)
    future = events.record(WORKLOAD, "KilterCheckRejected", "never fits", warning=True)
    assert future is not None
    future.result()
    events.close()
    (call,) = api.calls
    assert call.method == "POST" and call.path == "/api/v1/namespaces/ml/events"
    body = call.body
    assert body["involvedObject"] == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "namespace": "ml",
        "name": "job-a",
        "uid": "u-1",
    }
    assert body["type"] == "Warning" and body["reason"] == "KilterCheckRejected" and body["message"] == "never fits"
    assert body["metadata"] == {"generateName": "job-a.", "namespace": "ml"}
    assert body["source"] == {"component": "kilter"} and body["count"] == 1


def test_the_same_event_is_written_once_per_window(api: FakeApi) -> None:
    now = [0.0]
    events = recorder(api, repeat_s=60.0, clock=lambda: now[0])
    assert events.record(WORKLOAD, "R", "m") is not None
    assert events.record(WORKLOAD, "R", "m") is None
    assert events.record(WORKLOAD, "R", "other message") is not None
    now[0] = 61.0
    assert events.record(WORKLOAD, "R", "m") is not None
    events.close()
    assert len(api.calls) == 3


def test_a_follower_records_nothing(api: FakeApi) -> None:
    events = recorder(api, is_writer=lambda: False)
    assert events.record(WORKLOAD, "R", "m") is None
    events.close()
    assert api.calls == []


def test_a_refused_write_is_counted_not_raised(api: FakeApi, answers: Api) -> None:
    answers.fail = True
    events = recorder(api)
    assert events.failed == 0
    future = events.record(WORKLOAD, "R", "m")
    assert future is not None and future.result() is None
    events.close()
    assert events.failed == 1 and len(api.calls) == 1  # asked once, refused, and the caller never saw it
