"""The AdmissionCheck controller writes through the API with server-side apply, once per decision,
and hands Ready plans to the extender's gang book."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from kilter.extenders.gangs import GangBook, GangId
from kilter.state.api import ApiServer
from kilter.state.store import ClusterStore
from kilter.webhooks.admissioncheck import CONTROLLER_NAME, CheckDecision, Controller
from tests.webhooks.test_admissioncheck import CHECK, objects


class FakeApi(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.patches: list[tuple[str, dict[str, list[str]], str, dict[str, Any]]] = []
        self.fail_next = 0


class _Handler(BaseHTTPRequestHandler):
    server: FakeApi

    def log_message(self, *args: object) -> None:
        return None

    def do_PATCH(self) -> None:
        url = urlsplit(self.path)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.patches.append((url.path, parse_qs(url.query), self.headers["Content-Type"], body))
        code, out = (200, body)
        if self.server.fail_next:
            self.server.fail_next -= 1
            code, out = 500, {"kind": "Status", "status": "Failure", "message": "etcd timed out", "code": 500}
        data = json.dumps(out).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def api() -> Iterator[FakeApi]:
    server = FakeApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def controller(api: FakeApi, on_ready: Any = None) -> tuple[Controller, ClusterStore]:
    store = ClusterStore()
    store.replace(objects())
    connection = ApiServer("http", "127.0.0.1", api.server_address[1])
    return Controller(store, connection, on_ready=on_ready), store


def test_each_decision_is_applied_once_with_only_kilters_entry(api: FakeApi) -> None:
    ctl, _ = controller(api)
    asyncio.run(ctl.run_once())
    paths = [p for p, _, _, _ in api.patches]
    assert paths[0] == f"/apis/kueue.x-k8s.io/v1beta2/admissionchecks/{CHECK}/status"
    assert sorted(paths[1:]) == sorted(
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/{name}/status"
        for name in ("fits", "spans", "later", "never")
    )
    for _, query, content_type, body in api.patches:
        assert query == {"fieldManager": [CONTROLLER_NAME], "force": ["true"]}
        assert content_type == "application/apply-patch+yaml"
        assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    fits = next(b for p, _, _, b in api.patches if p.endswith("/fits/status"))
    assert [e["name"] for e in fits["status"]["admissionChecks"]] == [CHECK]
    assert fits["status"]["admissionChecks"][0]["state"] == "Ready"
    api.patches.clear()
    asyncio.run(ctl.run_once())  # nothing changed: only the check's Active status again
    assert [p for p, _, _, _ in api.patches] == [f"/apis/kueue.x-k8s.io/v1beta2/admissionchecks/{CHECK}/status"]


def test_a_failed_write_is_tried_again_next_round(api: FakeApi) -> None:
    ctl, _ = controller(api)
    api.fail_next = 2  # the Active status and the first workload
    asyncio.run(ctl.run_once())
    assert ctl.errors == 2
    api.patches.clear()
    asyncio.run(ctl.run_once())
    assert len([p for p, _, _, _ in api.patches if "/workloads/" in p]) == 1


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
