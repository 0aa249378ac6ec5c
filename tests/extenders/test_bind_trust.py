"""The bind verb trusts nothing in its body (issue #17): whoever reaches kilter's port can send one.

A bind is done only for a pod this process filtered, pending, onto a Node
the state holds; never for a pod bound elsewhere, and never with a name that
is not a Kubernetes name (it would go into an API path). Bookings of binds the
feed never confirms expire.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from kilter.state.store import ASSUME_TTL_S
from tests.extenders.conftest import (
    Served,
    _Server,
    cluster_objects,
    names_args,
    pod_json,
    serve_config,
    serve_snapshot,
    write_snapshot,
)
from tests.fakeapi import Answer, Call, FakeApi, running
from tests.live_mode import kubeconfig

TOKEN = "kilter-test-token"
FREE_TRAYS = [f"r1-t{t:02d}" for t in range(18) if t != 5] + [f"r2-t{t:02d}" for t in range(2, 18)]


def bind_body(pod: dict[str, Any], node: str) -> dict[str, str]:
    meta = pod["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}


def filter_then_bind(served: Served, pod: dict[str, Any], node: str) -> str:
    """What kube-scheduler does (filter, then bind); the bind's ``Error``."""
    served.post("filter", names_args(pod, [node]))
    status, result = served.post("bind", bind_body(pod, node))
    assert status == 200
    return str(result["Error"])


@pytest.fixture
def snapshot_served(tmp_path: Path) -> Iterator[Served]:
    with serve_snapshot(tmp_path) as served:
        yield served


def test_a_bind_of_a_running_pod_is_refused_and_its_gpus_stay_booked_where_it_runs(served: Served) -> None:
    forged = pod_json("busy", 4)  # the running pod's name and uid, shown pending
    assert filter_then_bind(served, forged, "r1-t00") == 'pod ml/busy is already assigned to node "r2-t00"'
    _, after = served.post("filter", names_args(pod_json("q", 4), ["r2-t00", "r1-t00"]))
    assert after["NodeNames"] == ["r1-t00"]  # r2-t00 still full, r1-t00 still free


def test_a_bind_to_a_node_that_does_not_exist_is_refused(served: Served) -> None:
    assert filter_then_bind(served, pod_json("p", 4), "ghost") == "node ghost does not exist"
    assert filter_then_bind(served, pod_json("p", 4), "r1-t00") == ""


def test_a_bind_of_a_pod_kilter_never_filtered_is_refused(served: Served) -> None:
    status, result = served.post("bind", bind_body(pod_json("p", 4), "r1-t00"))
    assert status == 200 and result["Error"] == "pod ml/p (uid uid-p) was not filtered by kilter"
    _, after = served.post("filter", names_args(pod_json("q", 4), ["r1-t00"]))
    assert after["NodeNames"] == ["r1-t00"]


def test_a_bind_naming_a_pending_pod_with_another_uid_is_refused(served: Served) -> None:
    served.replace([*cluster_objects(), pod_json("waiting", 4)])
    _wait(lambda: served.store.pod_named("ml", "waiting") is not None)
    forged = pod_json("waiting", 4, uid="uid-forged")
    assert filter_then_bind(served, forged, "r1-t00") == "pod ml/waiting has uid uid-waiting, not uid-forged"
    assert filter_then_bind(served, pod_json("waiting", 4), "r1-t00") == ""


def test_bookings_of_binds_the_feed_never_shows_expire(snapshot_served: Served) -> None:
    store = snapshot_served.store
    now = [0.0]
    store.clock = lambda: now[0]
    # A live feed's assume time; a snapshot's bookings last until a snapshot shows the pod (test_snapshot_mode_trust),
    # and a live feed's binds of pods the API server lacks fail, so never book.
    store.assume_ttl_s = ASSUME_TTL_S
    for i, tray in enumerate(FREE_TRAYS):  # pods that never exist, bound onto every free tray
        assert filter_then_bind(snapshot_served, pod_json(f"fake-{i}", 4), tray) == ""
    _, full = snapshot_served.post("filter", names_args(pod_json("real", 4), FREE_TRAYS))
    assert full["NodeNames"] == []
    now[0] = store.assume_ttl_s + 1
    _, free = snapshot_served.post("filter", names_args(pod_json("real", 4), FREE_TRAYS))
    assert free["NodeNames"] == FREE_TRAYS
    assert store.assumed_expired == len(FREE_TRAYS)


def test_a_pod_the_feed_shows_bound_keeps_its_booking_past_the_assume_time(snapshot_served: Served) -> None:
    store = snapshot_served.store
    now = [0.0]
    store.clock = lambda: now[0]
    objects = [*cluster_objects(), pod_json("p", 4)]
    snapshot_served.replace(objects)
    _wait(lambda: store.pod("uid-p") is not None)
    assert filter_then_bind(snapshot_served, pod_json("p", 4), "r1-t00") == ""
    now[0] = store.assume_ttl_s + 1
    _, after = snapshot_served.post("filter", names_args(pod_json("q", 4), ["r1-t00"]))
    assert after["NodeNames"] == [] and store.assumed_expired == 0


# ---------------------------------------------------------------- with an API server


class Recorder:
    """kube-apiserver's answer to a binding: 201 (this stand-in binds whatever it is asked to)."""

    def __call__(self, call: Call) -> Answer:
        return 201, call.body


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with running(Recorder()) as server:
        yield server


@pytest.fixture
def connected(tmp_path: Path, api: FakeApi) -> Iterator[Served]:
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, cluster_objects())
    app, store = build_app(serve_config(snapshot, kubeconfig=kubeconfig(tmp_path / "kubeconfig", api.port, TOKEN)))
    with _Server(app, None) as port:
        yield Served(app, store, snapshot, port)


def test_a_forged_bind_of_a_pod_kilter_never_scheduled_makes_no_api_call(connected: Served, api: FakeApi) -> None:
    body = {"PodName": "coredns-abc", "PodNamespace": "kube-system", "PodUID": "u", "Node": "r1-t00"}
    status, result = connected.post("bind", body)
    assert status == 200 and result["Error"] == "pod kube-system/coredns-abc (uid u) was not filtered by kilter"
    assert [c for c in api.calls if c.method == "POST"] == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("namespace", "a/../../../apis/foo", id="a namespace that walks the path"),
        pytest.param("namespace", "ML", id="an upper-case namespace"),
        pytest.param("name", "p/binding?x=", id="a name with a slash and a query"),
        pytest.param("name", "p%2Fq", id="a name with an escaped slash"),
    ],
)
def test_a_bind_whose_names_are_not_kubernetes_names_makes_no_api_call(
    connected: Served, api: FakeApi, field: str, value: str
) -> None:
    pod = pod_json("p", 4)
    pod["metadata"][field] = value
    error = filter_then_bind(connected, pod, "r1-t00")
    assert "is not a DNS-1123" in error
    assert [c for c in api.calls if c.method == "POST"] == []


def test_a_bind_through_the_api_carries_the_uid_and_an_escaped_path(connected: Served, api: FakeApi) -> None:
    pod = pod_json("p.v1", 4)
    assert filter_then_bind(connected, pod, "r1-t00") == ""
    (call,) = [c for c in api.calls if c.method == "POST"]
    assert call.path == "/api/v1/namespaces/ml/pods/p.v1/binding"
    assert call.body["metadata"]["uid"] == "uid-p.v1"


def _wait(condition: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the snapshot was not reloaded"
        time.sleep(0.02)
