"""With a cluster connected, bind creates the pods/binding subresource through the API server.

The API server here is a small HTTP server on 127.0.0.1 that answers the
binding call as kube-apiserver does: 201 with the Binding, 409 with a
Status when the pod is already bound, 401 without the token.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from tests.extenders.conftest import (
    Served,
    _Server,
    cluster_objects,
    names_args,
    pod_json,
    serve_config,
    write_snapshot,
)
from tests.fakeapi import Answer, Call, FakeApi, running, status
from tests.live_mode import kubeconfig

TOKEN = "kilter-test-token"


class Binder:
    """Answers the binding call as kube-apiserver does: 201 with the Binding, 409 when the pod is already
    bound, 401 without the token."""

    def __init__(self) -> None:
        self.bound: set[str] = set()

    def __call__(self, call: Call) -> Answer:
        if call.authorization != f"Bearer {TOKEN}":
            return status(401, "Unauthorized", "Unauthorized")
        parts = call.path.split("/")  # /api/v1/namespaces/NS/pods/NAME/binding
        key = f"{parts[4]}/{parts[6]}"
        if key in self.bound:
            message = f'Operation cannot be fulfilled on pods/binding "{parts[6]}": pod {parts[6]} is already assigned'
            return status(409, "Conflict", message + ' to node "x"')
        self.bound.add(key)
        return 201, call.body


@pytest.fixture
def binder() -> Binder:
    return Binder()


@pytest.fixture
def api(binder: Binder) -> Iterator[FakeApi]:
    with running(binder) as server:
        yield server


@pytest.fixture
def connected(tmp_path: Path, api: FakeApi) -> Iterator[Served]:
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, cluster_objects())
    args = serve_config(snapshot, kubeconfig=kubeconfig(tmp_path / "kubeconfig", api.port, TOKEN))
    app, store = build_app(args)
    with _Server(app, None) as port:
        yield Served(app, store, snapshot, port)


def bind_body(pod: dict[str, Any], node: str) -> dict[str, str]:
    meta = pod["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}


def test_bind_creates_the_binding_through_the_api(connected: Served, api: FakeApi) -> None:
    pod = pod_json("p", 4)
    connected.post("filter", names_args(pod, ["r1-t00"]))
    status, result = connected.post("bind", bind_body(pod, "r1-t00"))
    assert status == 200 and result == {"Error": ""}
    call = api.calls[-1]
    path, auth, content_type, body = call.path, call.authorization, call.content_type, call.body
    assert call.method == "POST" and path == "/api/v1/namespaces/ml/pods/p/binding"
    assert auth == f"Bearer {TOKEN}" and content_type == "application/json"
    assert body == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": "ml", "uid": "uid-p"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "r1-t00"},
    }
    # And the state knows at once: the tray is full for the next 4-GPU pod.
    _, after = connected.post("filter", names_args(pod_json("q", 4), ["r1-t00"]))
    assert after["NodeNames"] == []


def test_a_refused_binding_is_reported_in_the_error_field_and_books_nothing(connected: Served, binder: Binder) -> None:
    binder.bound.add("ml/p")
    pod = pod_json("p", 4)
    connected.post("filter", names_args(pod, ["r1-t00"]))
    status, result = connected.post("bind", bind_body(pod, "r1-t00"))
    assert status == 200
    assert result["Error"].startswith("binding failed: API server answered 409: Operation cannot be fulfilled")
    _, after = connected.post("filter", names_args(pod_json("q", 4), ["r1-t00"]))
    assert after["NodeNames"] == ["r1-t00"]


def test_a_wrong_token_is_a_bind_error(tmp_path: Path, api: FakeApi) -> None:
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, cluster_objects())
    app, store = build_app(serve_config(snapshot, kubeconfig=kubeconfig(tmp_path / "kc", api.port, "bad")))
    with _Server(app, None) as port:
        served = Served(app, store, snapshot, port)
        served.post("filter", names_args(pod_json("p", 4), ["r1-t00"]))
        _, result = served.post("bind", bind_body(pod_json("p", 4), "r1-t00"))
    assert result == {"Error": "binding failed: API server answered 401: Unauthorized"}
